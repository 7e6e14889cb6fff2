// Command stacksync-renderer renders helm charts as `helm template` of the same helm version prints
// them, with helm's own library, for as long as its standard input stays open: stacksync starts it
// once and sends it every render, instead of starting a `helm` process per render.
//
// Protocol: frames in both directions, each a 4-byte big-endian length and that many bytes of
// JSON. stacksync sends requests (see request), the renderer answers each with one response
// carrying the request's id, in the order renders finish (several may be in flight). A frame
// larger than maxFrame, or one that is not JSON, ends the process with a message on stderr: the
// two sides no longer agree on the stream, and stacksync starts a new renderer.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
)

// maxFrame bounds one frame either way: a request (values files) or a response (a manifest).
const maxFrame = 128 << 20

// maxInFlight bounds the renders running at once; stacksync bounds them too (helm.parallelism),
// this only keeps a misbehaving client from starting unbounded goroutines.
const maxInFlight = 64

// gcPercent and memoryLimit are the garbage collector's settings unless GOGC and GOMEMLIMIT say
// otherwise. A render allocates many times what it keeps (values coalesced, templates parsed and
// run, every manifest parsed again to sort it), and the heap that lives on is small (the loaded
// charts): with Go's default (GOGC=100) a fleet's renders spent about a quarter of their CPU
// collecting. At 400 the heap may grow to five times what lives, and the soft limit keeps it
// well inside the container's memory however large the charts kept are (docs/performance.md,
// "The library renderer").
const (
	gcPercent   = 400
	memoryLimit = 512 << 20
)

// request is one message from stacksync.
//
//   - op "render": render Chart (a directory or a .tgz) as `helm template Name Chart
//     --namespace Namespace [--kube-version KubeVersion] [--include-crds] -f <each of Values>`.
//     Group names the release the chart belongs to (for "retain"), may be empty. Probe renders
//     with cheap stand-ins for the costly generators (probe.go): its output is only compared
//     with a real render's, to tell the generated fields.
//   - op "retain": drop every cached chart whose group is not in Groups, or whose files are gone.
//   - op "version": the helm version rendered with.
type request struct {
	ID          uint64       `json:"id"`
	Op          string       `json:"op"`
	Chart       string       `json:"chart,omitempty"`
	Group       string       `json:"group,omitempty"`
	Name        string       `json:"name,omitempty"`
	Namespace   string       `json:"namespace,omitempty"`
	KubeVersion string       `json:"kubeVersion,omitempty"`
	IncludeCRDs bool         `json:"includeCrds,omitempty"`
	Probe       bool         `json:"probe,omitempty"`
	Values      []valuesFile `json:"values,omitempty"`
	Groups      []string     `json:"groups,omitempty"`
}

// valuesFile is one `-f` file: its name (for messages) and its content.
type valuesFile struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// response answers the request with the same id: Manifest is what `helm template` prints on
// success; Error is helm's message on failure. Version answers "version"; Dropped, "retain".
type response struct {
	ID       uint64 `json:"id"`
	Manifest string `json:"manifest,omitempty"`
	Error    string `json:"error,omitempty"`
	Version  string `json:"version,omitempty"`
	// Features answers "version" too: what this renderer does beyond helm template ("probe").
	Features []string `json:"features,omitempty"`
	Dropped  int      `json:"dropped,omitempty"`
	// Cached tells whether the chart came from the cache (for tests and debugging).
	Cached bool `json:"cached,omitempty"`
}

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println(helmVersion())
		return
	}
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: stacksync-renderer [--version]  (requests on stdin, see main.go)")
		os.Exit(2)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	// helm's warnings (coalescing, deprecated charts) go to stderr, as `helm template`'s do.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "stacksync-renderer: %v\n", err)
		os.Exit(1)
	}
}

// serve answers requests from in on out until in ends.
func serve(in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 1<<16)
	w := &writer{out: bufio.NewWriterSize(out, 1<<16)}
	cache := newCache(defaultCacheBytes, defaultCacheCharts)
	slots := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		frame, err := readFrame(r)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var req request
		if err := json.Unmarshal(frame, &req); err != nil {
			return fmt.Errorf("a request that is not JSON: %w", err)
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			w.send(handle(cache, &req))
		}()
	}
}

// handle answers one request; a panic in helm becomes that request's error.
func handle(cache *cache, req *request) (resp response) {
	resp.ID = req.ID
	defer func() {
		if p := recover(); p != nil {
			resp = response{ID: req.ID, Error: fmt.Sprintf("the renderer panicked: %v\n%s", p, debug.Stack())}
		}
	}()
	switch req.Op {
	case "render":
		manifest, cached, err := render(cache, req)
		if err != nil {
			resp.Error = err.Error()
		} else if len(manifest) > maxFrame-4096 {
			resp.Error = fmt.Sprintf("the rendered output (%d bytes) is larger than the renderer's limit of %d bytes", len(manifest), maxFrame-4096)
		} else {
			resp.Manifest, resp.Cached = manifest, cached
		}
	case "retain":
		resp.Dropped = cache.retain(req.Groups)
	case "version":
		resp.Version = helmVersion()
		resp.Features = []string{"probe"}
	default:
		resp.Error = fmt.Sprintf("unknown op %q", req.Op)
	}
	return resp
}

// helmVersion is the version of helm's library this binary was built with, as `helm version
// --short` of the same build prints it (set with -ldflags like helm's own build).
func helmVersion() string {
	return versionShort()
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > maxFrame {
		return nil, fmt.Errorf("a request of %d bytes, more than the limit of %d", n, maxFrame)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// writer sends whole frames, one at a time.
type writer struct {
	mu  sync.Mutex
	out *bufio.Writer
}

func (w *writer) send(resp response) {
	body, err := json.Marshal(resp)
	if err != nil {
		body, _ = json.Marshal(response{ID: resp.ID, Error: "cannot encode the response: " + err.Error()})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], uint32(len(body)))
	_, _ = w.out.Write(head[:])
	_, _ = w.out.Write(body)
	if err := w.out.Flush(); err != nil {
		// stacksync is gone: nothing left to answer.
		fmt.Fprintf(os.Stderr, "stacksync-renderer: cannot write a response: %v\n", err)
		os.Exit(1)
	}
}
