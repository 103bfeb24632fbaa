#include "textflag.h"

// func prlimit() (ret int64)
TEXT ·prlimit(SB), NOSPLIT, $0-8
	MOVD	$0, R0		// this process
	MOVD	$7, R1		// RLIMIT_NOFILE
	MOVD	$0, R2		// no new limit
	MOVD	$·saved(SB), R3
	MOVD	$261, R8	// SYS_prlimit64
	SVC
	MOVD	R0, ret+0(FP)
	RET
