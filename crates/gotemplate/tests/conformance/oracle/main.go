// Command oracle executes Go text/template with slim-sprig's TxtFuncMap (what the SCS
// cluster-stack-operator gives its values templates), for stacksync's conformance suite and
// template fuzzer. Built as a Go module (go.mod pins slim-sprig v3.0.0 and Go 1.26).
//
// Batch mode, the only mode: many cases per process. Input on stdin: one JSON object per line,
// {"name": "...", "template": "...", "data": {...}}. Output on stdout: one JSON object per line,
// in order, written as soon as the case has run (so a caller may also ask one case at a time):
// {"name": "...", "ok": true, "out": "..."} or {"name": "...", "ok": false, "err": "..."}. When
// the output is not valid UTF-8 (which JSON cannot carry), "out" has U+FFFD for the bad bytes
// and "out_b64" holds the exact bytes.
//
// Data is decoded as Kubernetes decodes unstructured objects: a JSON number is an int64 when it is
// integral and fits, a float64 otherwise.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"text/template"
	"time"
	"unicode/utf8"

	sprig "github.com/go-task/slim-sprig/v3"
)

// slimSprig lists the names in slim-sprig's GenericFuncMap; tests/conformance.rs reads this list,
// and main refuses to start when it is not exactly the map's names.
var slimSprig = []string{
	"hello", "ago", "date", "date_in_zone", "date_modify", "dateInZone", "dateModify", "duration",
	"durationRound", "htmlDate", "htmlDateInZone", "must_date_modify", "mustDateModify", "mustToDate",
	"now", "toDate", "unixEpoch", "trunc", "trim", "upper", "lower", "title", "substr", "repeat",
	"trimall", "trimAll", "trimSuffix", "trimPrefix", "contains", "hasPrefix", "hasSuffix", "quote",
	"squote", "cat", "indent", "nindent", "replace", "plural", "sha1sum", "sha256sum", "adler32sum",
	"toString", "atoi", "int64", "int", "float64", "seq", "toDecimal", "split", "splitList", "splitn",
	"toStrings", "until", "untilStep", "add1", "add", "sub", "div", "mod", "mul", "randInt", "biggest",
	"max", "min", "maxf", "minf", "ceil", "floor", "round", "join", "sortAlpha", "default", "empty",
	"coalesce", "all", "any", "compact", "mustCompact", "fromJson", "toJson", "toPrettyJson",
	"toRawJson", "mustFromJson", "mustToJson", "mustToPrettyJson", "mustToRawJson", "ternary",
	"typeOf", "typeIs", "typeIsLike", "kindOf", "kindIs", "deepEqual", "env", "expandenv",
	"getHostByName", "base", "dir", "clean", "ext", "isAbs", "osBase", "osClean", "osDir", "osExt",
	"osIsAbs", "b64enc", "b64dec", "b32enc", "b32dec", "tuple", "list", "dict", "get", "set", "unset",
	"hasKey", "pluck", "keys", "pick", "omit", "values", "append", "push", "mustAppend", "mustPush",
	"prepend", "mustPrepend", "first", "mustFirst", "rest", "mustRest", "last", "mustLast", "initial",
	"mustInitial", "reverse", "mustReverse", "uniq", "mustUniq", "without", "mustWithout", "has",
	"mustHas", "slice", "mustSlice", "concat", "dig", "chunk", "mustChunk", "fail", "regexMatch",
	"mustRegexMatch", "regexFindAll", "mustRegexFindAll", "regexFind", "mustRegexFind",
	"regexReplaceAll", "mustRegexReplaceAll", "regexReplaceAllLiteral", "mustRegexReplaceAllLiteral",
	"regexSplit", "mustRegexSplit", "regexQuoteMeta", "urlParse", "urlJoin",
}

// caseTimeout bounds one case (see main).
const caseTimeout = 5 * time.Second

type testCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data"`
}

type result struct {
	Name string `json:"name"`
	Ok   bool   `json:"ok"`
	Out  string `json:"out,omitempty"`
	// The output's exact bytes, when they are not valid UTF-8.
	OutB64 []byte `json:"out_b64,omitempty"`
	Err  string `json:"err,omitempty"`
}

// unstructured converts json.Number leaves as k8s.io/apimachinery's unstructured decoding does.
func unstructured(v interface{}) interface{} {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(t), 64)
		return f
	case map[string]interface{}:
		for k, e := range t {
			t[k] = unstructured(e)
		}
		return t
	case []interface{}:
		for i, e := range t {
			t[i] = unstructured(e)
		}
		return t
	}
	return v
}

func run(funcs template.FuncMap, c testCase) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	var data interface{}
	if len(c.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(c.Data))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", err
		}
		data = unstructured(data)
	}
	t, err := template.New(c.Name).Funcs(funcs).Parse(c.Template)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func main() {
	funcs := sprig.TxtFuncMap()
	var names []string
	for name := range funcs {
		names = append(names, name)
	}
	sort.Strings(names)
	listed := append([]string(nil), slimSprig...)
	sort.Strings(listed)
	if fmt.Sprint(names) != fmt.Sprint(listed) {
		fmt.Fprintf(os.Stderr, "oracle: the slimSprig list is not slim-sprig's function map:\n  map:  %v\n  list: %v\n", names, listed)
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for in.Scan() {
		var c testCase
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "oracle: bad input line:", err)
			os.Exit(2)
		}
		// A case runs at most caseTimeout: Go's text/template has no bounds, and a generated
		// template may ask for unbounded work. The answer then is an error, and the process
		// exits (the goroutine cannot be stopped); the caller starts another for the rest.
		type answer struct {
			out string
			err error
		}
		done := make(chan answer, 1)
		go func() {
			out, err := run(funcs, c)
			done <- answer{out, err}
		}()
		var a answer
		timedOut := false
		select {
		case a = <-done:
		case <-time.After(caseTimeout):
			a.err = fmt.Errorf("oracle: the case ran longer than %v", caseTimeout)
			timedOut = true
		}
		out, err := a.out, a.err
		r := result{Name: c.Name, Ok: err == nil, Out: out}
		if !utf8.ValidString(out) {
			r.OutB64 = []byte(out)
		}
		if err != nil {
			r.Err = err.Error()
		}
		if e := enc.Encode(r); e != nil {
			os.Exit(3)
		}
		if timedOut {
			fmt.Fprintf(os.Stderr, "oracle: timed out on %q\n", c.Template)
			os.Exit(4)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(2)
	}
}
