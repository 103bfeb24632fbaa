// Package metrics keeps the daemon's and the egress proxy's counters,
// gauges and histograms, and writes them in the Prometheus text exposition
// format (version 0.0.4), which Prometheus and every compatible scraper
// read. It does what cordon needs and no more: a Go program pays for its
// every dependency's initialisation at each start, and every `cordon`
// command, `cordon run` first of all, is a program start.
package metrics

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Family is one named metric with all its series: what a Registry holds.
type Family interface {
	// Name is the metric's name, unique in a registry.
	Name() string
	// write appends the family's HELP, TYPE and sample lines.
	write(b *bytes.Buffer)
}

// Registry holds families and serves them (it is an http.Handler).
type Registry struct {
	mu       sync.Mutex
	families map[string]Family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{families: map[string]Family{}} }

// Register adds families; a name already registered is refused (and
// nothing of that call is added).
func (r *Registry) Register(fs ...Family) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range fs {
		if r.families[f.Name()] != nil || seen[f.Name()] {
			return fmt.Errorf("metrics: %s is already registered", f.Name())
		}
		seen[f.Name()] = true
	}
	for _, f := range fs {
		r.families[f.Name()] = f
	}
	return nil
}

// MustRegister is Register that panics on a refusal (a programming error).
func (r *Registry) MustRegister(fs ...Family) {
	if err := r.Register(fs...); err != nil {
		panic(err)
	}
}

// ContentType is what ServeHTTP answers with.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Write appends every family, in the order of their names.
func (r *Registry) Write(b *bytes.Buffer) {
	r.mu.Lock()
	fs := make([]Family, 0, len(r.families))
	for _, f := range r.families {
		fs = append(fs, f)
	}
	r.mu.Unlock()
	slices.SortFunc(fs, func(a, b Family) int { return strings.Compare(a.Name(), b.Name()) })
	for _, f := range fs {
		f.write(b)
	}
}

// ServeHTTP writes the exposition.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	r.Write(&b)
	w.Header().Set("Content-Type", ContentType)
	_, _ = w.Write(b.Bytes())
}

// desc is a family's name, help and label names (and the order in which
// its labels are written: by name, as Prometheus's own client does).
type desc struct {
	name, help string
	labels     []string
	order      []int
}

func newDesc(name, help string, labels []string) desc {
	if !validName(name, true) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") || l == "le" {
			panic(fmt.Sprintf("metrics: invalid label name %q for %s", l, name))
		}
	}
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return desc{name: name, help: help, labels: slices.Clone(labels), order: order}
}

// validName: [a-zA-Z_][a-zA-Z0-9_]*, with colons too in metric names.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' || colon && c == ':'
		if !ok {
			return false
		}
	}
	return true
}

func (d *desc) Name() string { return d.name }

func (d *desc) header(b *bytes.Buffer, typ string) {
	b.WriteString("# HELP ")
	b.WriteString(d.name)
	b.WriteByte(' ')
	escape(b, d.help, false)
	b.WriteString("\n# TYPE ")
	b.WriteString(d.name)
	b.WriteByte(' ')
	b.WriteString(typ)
	b.WriteByte('\n')
}

// labelText is a series' labels as written between braces, without them:
// `a="x",b="y"`, by label name.
func (d *desc) labelText(values []string) string {
	if len(values) != len(d.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", d.name, len(d.labels), len(values)))
	}
	var b bytes.Buffer
	for n, i := range d.order {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d.labels[i])
		b.WriteString(`="`)
		escape(&b, values[i], true)
		b.WriteByte('"')
	}
	return b.String()
}

// sample writes one line: name{labels,extra} value.
func sample(b *bytes.Buffer, name, labels, extra string, v float64) {
	b.WriteString(name)
	if labels != "" || extra != "" {
		b.WriteByte('{')
		b.WriteString(labels)
		if labels != "" && extra != "" {
			b.WriteByte(',')
		}
		b.WriteString(extra)
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
}

// escape writes s with the format's escapes: backslash and newline, and in
// a label value the double quote.
func escape(b *bytes.Buffer, s string, quote bool) {
	for _, c := range []byte(s) {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// series is a vector's children by their label text, written in its order.
type series[T any] struct {
	mu   sync.Mutex
	kids map[string]*T
}

func (s *series[T]) get(key string, newT func() *T) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kids == nil {
		s.kids = map[string]*T{}
	}
	k := s.kids[key]
	if k == nil {
		k = newT()
		s.kids[key] = k
	}
	return k
}

func (s *series[T]) each(f func(key string, t *T)) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.kids))
	for k := range s.kids {
		keys = append(keys, k)
	}
	kids := make([]*T, len(keys))
	slices.Sort(keys)
	for i, k := range keys {
		kids[i] = s.kids[k]
	}
	s.mu.Unlock()
	for i, k := range keys {
		f(k, kids[i])
	}
}

// Counter is a value that only grows.
type Counter struct{ bits atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Add adds v, which must not be negative (a counter only grows).
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("metrics: a counter cannot decrease")
	}
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Value is the counter's value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

// CounterVec is a counter per combination of label values.
type CounterVec struct {
	desc
	s series[Counter]
}

// NewCounterVec returns a counter family with the given label names (none
// for a single counter).
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	return &CounterVec{desc: newDesc(name, help, labels)}
}

// With returns the counter of these label values (in the order of the
// label names), made at zero if it is new.
func (v *CounterVec) With(values ...string) *Counter {
	return v.s.get(v.labelText(values), func() *Counter { return new(Counter) })
}

func (v *CounterVec) write(b *bytes.Buffer) {
	v.header(b, "counter")
	v.s.each(func(key string, c *Counter) { sample(b, v.name, key, "", c.Value()) })
}

// Histogram counts observations into buckets by upper bound.
type Histogram struct {
	mu     sync.Mutex
	upper  []float64 // the buckets' upper bounds, ascending
	counts []uint64  // observations per bucket (not cumulative); one more for +Inf
	sum    float64
	count  uint64
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.upper, v) // the first bound ≥ v
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.count++
	h.mu.Unlock()
}

// HistogramVec is a histogram per combination of label values.
type HistogramVec struct {
	desc
	upper []float64
	s     series[Histogram]
}

// NewHistogramVec returns a histogram family with the given bucket upper
// bounds (ascending; +Inf is implied) and label names (none for a single
// histogram).
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	if len(buckets) == 0 || !slices.IsSorted(buckets) || slices.Contains(buckets, math.Inf(1)) {
		panic(fmt.Sprintf("metrics: %s: buckets must be finite and ascending", name))
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] == buckets[i-1] {
			panic(fmt.Sprintf("metrics: %s: bucket %v twice", name, buckets[i]))
		}
	}
	return &HistogramVec{desc: newDesc(name, help, labels), upper: slices.Clone(buckets)}
}

// With returns the histogram of these label values, made empty if new.
func (v *HistogramVec) With(values ...string) *Histogram {
	return v.s.get(v.labelText(values), func() *Histogram {
		return &Histogram{upper: v.upper, counts: make([]uint64, len(v.upper)+1)}
	})
}

func (v *HistogramVec) write(b *bytes.Buffer) {
	v.header(b, "histogram")
	v.s.each(func(key string, h *Histogram) {
		h.mu.Lock()
		counts, sum, count := slices.Clone(h.counts), h.sum, h.count
		h.mu.Unlock()
		var cum uint64
		for i, n := range counts {
			cum += n
			le := "+Inf"
			if i < len(v.upper) {
				le = formatFloat(v.upper[i])
			}
			sample(b, v.name+"_bucket", key, `le="`+le+`"`, float64(cum))
		}
		sample(b, v.name+"_sum", key, "", sum)
		sample(b, v.name+"_count", key, "", float64(count))
	})
}

// GaugeFunc is a gauge whose series are read when the registry is
// written: collect calls set once per series, with its value and label
// values (in the order of the label names).
type GaugeFunc struct {
	desc
	collect func(set func(v float64, values ...string))
}

// NewGaugeFunc returns a gauge family read by collect at each scrape.
func NewGaugeFunc(name, help string, labels []string, collect func(set func(v float64, values ...string))) *GaugeFunc {
	return &GaugeFunc{desc: newDesc(name, help, labels), collect: collect}
}

func (g *GaugeFunc) write(b *bytes.Buffer) {
	lines := map[string]float64{}
	g.collect(func(v float64, values ...string) { lines[g.labelText(values)] = v })
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	g.header(b, "gauge")
	for _, k := range keys {
		sample(b, g.name, k, "", lines[k])
	}
}
