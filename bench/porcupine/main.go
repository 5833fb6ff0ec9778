// Command porcheck checks a history for linearizability with porcupine
// (github.com/anishathalye/porcupine) used as a library, so bench/porcupine.py can time
// porcupine's whole process against `chaos check` on the same files.
//
// Usage: porcheck [-format jsonl|kv] FILE
//
// Formats:
//   - jsonl: our JSON Lines history (docs/design.md): one op object per line with type, process,
//     f, value, time and key. Client ops read/write/cas on a register per key (the cas-register
//     model, initial value null). Jepsen's rules: a fail completion did not happen (dropped), an
//     info completion or a missing one may have happened at any time after its invocation
//     (returns at +infinity with an unknown output; an info read says nothing and is dropped).
//     Nemesis ops are skipped. Call and return times are the ops' time fields.
//   - kv: porcupine's test_data/kv logs (one EDN map per line with :process, :type, :f
//     get/put/append, :key and :value); a per-key string register whose initial value is "".
//     Call and return times are the line numbers.
//
// Both check a model partitioned by key (porcupine checks the keys in parallel and stops at the
// first invalid one). Prints one line "valid" or "invalid" with the counts, exit 0 or 1; 2 for
// unreadable input.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// opcodes of an input
const (
	opRead uint8 = iota
	opWrite
	opCas
	opAppend
)

type input struct {
	key  string
	op   uint8
	a, b string // write/put/append: a; cas: a expected, b new (values as JSON text or strings)
}

type output struct {
	value   string // read/get: what it returned
	unknown bool   // info or never completed: anything goes
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range history {
		k := op.Input.(input).key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, byKey[k])
	}
	return parts
}

func step(state, in, out interface{}) (bool, interface{}) {
	s := state.(string)
	i := in.(input)
	o := out.(output)
	switch i.op {
	case opRead:
		return o.unknown || o.value == s, s
	case opWrite:
		return true, i.a
	case opAppend:
		return true, s + i.a
	default: // cas: an ok one applied (state was a); an unknown one applied if it could
		if s == i.a {
			return true, i.b
		}
		return o.unknown, s
	}
}

func hash(state interface{}) uint64 {
	h := fnv.New64a()
	h.Write([]byte(state.(string)))
	return h.Sum64()
}

func model(init string) porcupine.Model {
	return porcupine.Model{
		Partition: partition,
		Init:      func() interface{} { return init },
		Step:      step,
		Hash:      hash,
	}
}

// ---------------------------------------------------------------------------------------------
// our JSON Lines

type jsonOp struct {
	Type    string          `json:"type"`
	Process json.RawMessage `json:"process"`
	F       string          `json:"f"`
	Value   json.RawMessage `json:"value"`
	Time    int64           `json:"time"`
	Key     json.RawMessage `json:"key"`
}

type pending struct {
	in   input
	call int64
}

// pairer turns invocations and completions into operations (Jepsen's rules, see the top).
type pairer struct {
	open map[string]pending
	ops  []porcupine.Operation
}

func (p *pairer) invoke(proc string, in input, t int64) {
	p.open[proc] = pending{in, t}
}

// complete pairs a completion ("ok", "fail" or "info"; value: what a read returned) with the
// open invocation of proc; false when there is none.
func (p *pairer) complete(proc, typ, value string, t int64) bool {
	inv, ok := p.open[proc]
	if !ok {
		return false
	}
	delete(p.open, proc)
	switch typ {
	case "ok":
		out := output{}
		if inv.in.op == opRead {
			out.value = value
		}
		p.ops = append(p.ops, porcupine.Operation{Input: inv.in, Call: inv.call, Output: out, Return: t})
	case "info":
		p.crashed(inv)
	}
	return true
}

func (p *pairer) crashed(inv pending) {
	if inv.in.op != opRead { // a read of unknown outcome says nothing
		p.ops = append(p.ops, porcupine.Operation{
			Input: inv.in, Call: inv.call, Output: output{unknown: true}, Return: math.MaxInt64,
		})
	}
}

// finish returns every operation, the invocations never completed as crashed.
func (p *pairer) finish() []porcupine.Operation {
	for _, inv := range p.open {
		p.crashed(inv)
	}
	return p.ops
}

// lines calls fn with each non-blank line of path and its 1-based number.
func lines(path string, fn func(raw []byte, line int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	line := int64(0)
	for sc.Scan() {
		line++
		if raw := sc.Bytes(); len(bytes.TrimSpace(raw)) > 0 {
			if err := fn(raw, line); err != nil {
				return fmt.Errorf("%s: line %d: %v", path, line, err)
			}
		}
	}
	return sc.Err()
}

func readJSONL(path string) ([]porcupine.Operation, error) {
	p := &pairer{open: make(map[string]pending)}
	err := lines(path, func(raw []byte, _ int64) error {
		var o jsonOp
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		proc := string(o.Process)
		if proc == `"nemesis"` {
			return nil
		}
		if o.Type != "invoke" {
			if !p.complete(proc, o.Type, string(o.Value), o.Time) {
				return fmt.Errorf("%s completion without an invocation", o.Type)
			}
			return nil
		}
		in := input{key: string(o.Key)}
		switch o.F {
		case "read":
			in.op = opRead
		case "write":
			in.op, in.a = opWrite, string(o.Value)
		case "cas":
			var pair []json.RawMessage
			if err := json.Unmarshal(o.Value, &pair); err != nil || len(pair) != 2 {
				return fmt.Errorf("cas value must be [expected, new]")
			}
			in.op, in.a, in.b = opCas, string(pair[0]), string(pair[1])
		default:
			return fmt.Errorf("f %q is not read/write/cas", o.F)
		}
		p.invoke(proc, in, o.Time)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p.finish(), nil
}

// ---------------------------------------------------------------------------------------------
// porcupine's kv logs: {:process 9, :type :invoke, :f :append, :key "0", :value "x 9 0 y"}

// field returns the text after "name " up to the next ", " or the closing "}".
func field(line []byte, name string) []byte {
	i := bytes.Index(line, []byte(name+" "))
	if i < 0 {
		return nil
	}
	rest := line[i+len(name)+1:]
	if len(rest) > 0 && rest[0] == '"' {
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 {
			return nil
		}
		return rest[:end+2]
	}
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return rest
	}
	return rest[:end]
}

func unquote(b []byte) string {
	if len(b) >= 2 && b[0] == '"' {
		return string(b[1 : len(b)-1])
	}
	return ""
}

func readKV(path string) ([]porcupine.Operation, error) {
	p := &pairer{open: make(map[string]pending)}
	err := lines(path, func(raw []byte, line int64) error {
		proc := string(field(raw, ":process"))
		if _, err := strconv.Atoi(proc); err != nil {
			return fmt.Errorf("no :process number")
		}
		typ, fn := string(field(raw, ":type")), string(field(raw, ":f"))
		if typ != ":invoke" {
			if !p.complete(proc, strings.TrimPrefix(typ, ":"), unquote(field(raw, ":value")), line) {
				return fmt.Errorf("completion without an invocation")
			}
			return nil
		}
		in := input{key: unquote(field(raw, ":key"))}
		switch fn {
		case ":get":
			in.op = opRead
		case ":put":
			in.op, in.a = opWrite, unquote(field(raw, ":value"))
		case ":append":
			in.op, in.a = opAppend, unquote(field(raw, ":value"))
		default:
			return fmt.Errorf("f %s is not get/put/append", fn)
		}
		p.invoke(proc, in, line)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p.finish(), nil
}

func main() {
	format := flag.String("format", "jsonl", "jsonl (our history) or kv (porcupine's kv logs)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcheck [-format jsonl|kv] FILE")
		os.Exit(2)
	}
	var ops []porcupine.Operation
	var err error
	init := "null"
	switch *format {
	case "jsonl":
		ops, err = readJSONL(flag.Arg(0))
	case "kv":
		ops, err = readKV(flag.Arg(0))
		init = ""
	default:
		err = fmt.Errorf("-format %s: expected jsonl or kv", *format)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	keys := make(map[string]struct{})
	for _, op := range ops {
		keys[op.Input.(input).key] = struct{}{}
	}
	verdict := "valid"
	if !porcupine.CheckOperations(model(init), ops) {
		verdict = "invalid"
	}
	fmt.Printf("%s (%d ops, %d keys)\n", verdict, len(ops), len(keys))
	if verdict != "valid" {
		os.Exit(1)
	}
}
