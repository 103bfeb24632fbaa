#include "textflag.h"

// func prlimit() (ret int64)
TEXT ·prlimit(SB), NOSPLIT, $0-8
	MOVQ	$302, AX	// SYS_prlimit64
	MOVQ	$0, DI		// this process
	MOVQ	$7, SI		// RLIMIT_NOFILE
	MOVQ	$0, DX		// no new limit
	LEAQ	·saved(SB), R10
	SYSCALL
	MOVQ	AX, ret+0(FP)
	RET
