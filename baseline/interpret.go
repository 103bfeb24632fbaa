package baseline

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// Interpreter runs a compiled filter in x/net/bpf's interpreter, for tests
// that check what a program decides (the kernel's own answer is checked by
// loading it).
type Interpreter struct{ vm *bpf.VM }

// NewInterpreter prepares prog, refusing an instruction the interpreter
// does not know.
func NewInterpreter(prog []bpf.RawInstruction) (*Interpreter, error) {
	ins := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		ins[i] = r.Disassemble()
		if _, ok := ins[i].(bpf.RawInstruction); ok {
			return nil, fmt.Errorf("instruction %d (%+v) is not one the interpreter knows", i, r)
		}
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		return nil, err
	}
	return &Interpreter{vm}, nil
}

// Decide is the program's return value for call nr of architecture audit
// with args. The interpreter's loads read big-endian words where the
// kernel reads native ones, so each 32-bit field of seccomp_data is laid
// out big-endian at its offset: the program reads the values the kernel
// would.
func (in *Interpreter) Decide(audit, nr uint32, args ...uint64) (uint32, error) {
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], audit)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[offArgs+8*i+4:], uint32(a>>32))
	}
	ret, err := in.vm.Run(data)
	return uint32(ret), err
}
