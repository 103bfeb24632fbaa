#include "textflag.h"

// func cloneRun(flags, stack, ptid uintptr, prog unsafe.Pointer, n uintptr) (pid, errno uintptr)
//
// clone(2) with the flags given (CLONE_VM among them). The parent returns
// the child's pid or the error. The child, on its own stack and sharing
// this process's memory, runs no Go code: it executes the n steps at prog
// (see step in clonexec_linux.go) one system call after another, storing
// each result in its step, and exits 127 at the first step whose result
// is refused; the last step is an execve, which does not return.
//
// A step with from set takes its first argument from there (an earlier
// step's result). A checkSpawn step is a clone(2) too: the process it makes goes on with
// the a6 steps at want (a Helper's), and ends with their last, an exit.
TEXT ·cloneRun(SB),NOSPLIT,$0-56
	MOVQ	flags+0(FP), DI
	MOVQ	stack+8(FP), SI
	MOVQ	ptid+16(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	prog+24(FP), R12
	MOVQ	n+32(FP), R13
	MOVQ	$56, AX // SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	parent
	MOVQ	$0, pid+40(FP)
	NEGQ	AX
	MOVQ	AX, errno+48(FP)
	RET
parent:
	MOVQ	AX, pid+40(FP)
	MOVQ	$0, errno+48(FP)
	RET

child:
	TESTQ	R13, R13
	JEQ	exit
	MOVQ	0(R12), AX
	MOVQ	8(R12), DI
	MOVQ	16(R12), SI
	MOVQ	24(R12), DX
	MOVQ	32(R12), R10
	MOVQ	40(R12), R8
	MOVQ	48(R12), R9
	MOVQ	88(R12), BX // from: where an earlier step's result, the first argument, is
	TESTQ	BX, BX
	JEQ	call
	MOVQ	0(BX), DI
call:
	SYSCALL
	MOVQ	56(R12), BX // check
	CMPQ	BX, $3 // checkSpawn
	JNE	store
	CMPQ	AX, $0
	JNE	store
	MOVQ	48(R12), R13 // the new process (which stores nothing here): the helper's steps
	MOVQ	64(R12), R12
	JMP	child
store:
	MOVQ	AX, 72(R12) // result
	CMPQ	BX, $3
	JEQ	checkerrno
checkexcept:
	CMPQ	BX, $4 // checkErrnoExcept: want, one error, does not fail
	JNE	checkerrno1
	CMPQ	AX, 64(R12)
	JEQ	next
	JMP	checkerrno
checkerrno1:
	CMPQ	BX, $1 // checkErrno: a negative result fails
	JNE	checkwant
checkerrno:
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	JMP	next
checkwant:
	CMPQ	BX, $2 // checkWant: any result but want fails
	JNE	next
	CMPQ	AX, 64(R12)
	JNE	fail
next:
	ADDQ	$96, R12
	DECQ	R13
	JMP	child
fail:
	MOVQ	$1, 80(R12) // failed
exit:
	MOVQ	$127, DI
	MOVQ	$231, AX // SYS_exit_group
	SYSCALL
	JMP	exit
