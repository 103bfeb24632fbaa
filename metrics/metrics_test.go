package metrics

import (
	"bytes"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func exposition(r *Registry) string {
	var b bytes.Buffer
	r.Write(&b)
	return b.String()
}

// TestExposition: the text format, whole: families by name, series by
// labels, labels by name, histograms cumulative with le last and +Inf,
// escapes in help and label values.
func TestExposition(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec("cordon_things_total", "Things, by kind.\nSecond \\ line.", "kind", "color")
	c.With("b", "red").Add(2.5)
	c.With("a", `say "hi"`+"\n").Inc()
	h := NewHistogramVec("cordon_wait_seconds", "Waits.", []float64{0.001, 0.5, 2})
	for _, v := range []float64{1.0 / 1024, 0.25, 0.5, 3} { // exact in binary; 0.5 on a bound
		h.With().Observe(v)
	}
	g := NewGaugeFunc("cordon_live", "Live ones.", []string{"tier"}, func(set func(float64, ...string)) {
		set(2, "process")
		set(math.Inf(1), "container")
	})
	r.MustRegister(h, c, g)
	want := `# HELP cordon_live Live ones.
# TYPE cordon_live gauge
cordon_live{tier="container"} +Inf
cordon_live{tier="process"} 2
# HELP cordon_things_total Things, by kind.\nSecond \\ line.
# TYPE cordon_things_total counter
cordon_things_total{color="red",kind="b"} 2.5
cordon_things_total{color="say \"hi\"\n",kind="a"} 1
# HELP cordon_wait_seconds Waits.
# TYPE cordon_wait_seconds histogram
cordon_wait_seconds_bucket{le="0.001"} 1
cordon_wait_seconds_bucket{le="0.5"} 3
cordon_wait_seconds_bucket{le="2"} 3
cordon_wait_seconds_bucket{le="+Inf"} 4
cordon_wait_seconds_sum 3.7509765625
cordon_wait_seconds_count 4
`
	if got := exposition(r); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Header().Get("Content-Type") != ContentType || rec.Body.String() != want {
		t.Errorf("served %q with %q", rec.Body.String(), rec.Header().Get("Content-Type"))
	}
}

// TestHistogramLabels: labelled histograms keep le after their labels.
func TestHistogramLabels(t *testing.T) {
	r := NewRegistry()
	h := NewHistogramVec("x_seconds", "X.", []float64{1}, "source")
	h.With("pool").Observe(0.5)
	r.MustRegister(h)
	for _, line := range []string{`x_seconds_bucket{source="pool",le="1"} 1`, `x_seconds_bucket{source="pool",le="+Inf"} 1`, `x_seconds_sum{source="pool"} 0.5`, `x_seconds_count{source="pool"} 1`} {
		if !strings.Contains(exposition(r), line+"\n") {
			t.Errorf("no line %s in:\n%s", line, exposition(r))
		}
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	r := NewRegistry()
	a := NewCounterVec("a_total", "A.")
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	b := NewCounterVec("b_total", "B.")
	if err := r.Register(b, NewCounterVec("a_total", "A again.")); err == nil {
		t.Fatal("a second a_total was registered")
	}
	if err := r.Register(b, NewCounterVec("b_total", "B again.")); err == nil {
		t.Fatal("b_total twice in one call was registered")
	}
	if err := r.Register(b); err != nil {
		t.Fatalf("b_total after refused calls: %v", err)
	}
}

// TestInvalid: misuse panics, as a programming error should.
func TestInvalid(t *testing.T) {
	for name, f := range map[string]func(){
		"metric name":      func() { NewCounterVec("1abc", "x") },
		"label name":       func() { NewCounterVec("abc", "x", "a-b") },
		"reserved label":   func() { NewCounterVec("abc", "x", "__name") },
		"le label":         func() { NewHistogramVec("abc", "x", []float64{1}, "le") },
		"label count":      func() { NewCounterVec("abc", "x", "a").With() },
		"negative add":     func() { NewCounterVec("abc", "x").With().Add(-1) },
		"unsorted buckets": func() { NewHistogramVec("abc", "x", []float64{2, 1}) },
		"repeated bucket":  func() { NewHistogramVec("abc", "x", []float64{1, 1}) },
		"no buckets":       func() { NewHistogramVec("abc", "x", nil) },
		"inf bucket":       func() { NewHistogramVec("abc", "x", []float64{1, math.Inf(1)}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestConcurrent: increments and observations from many goroutines are
// all counted while the registry is being written.
func TestConcurrent(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec("n_total", "N.", "k")
	h := NewHistogramVec("d_seconds", "D.", []float64{1})
	r.MustRegister(c, h)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.With("x").Inc()
				h.With().Observe(0.5)
				if i%100 == 0 {
					exposition(r)
				}
			}
		}()
	}
	wg.Wait()
	out := exposition(r)
	for _, line := range []string{`n_total{k="x"} 8000`, `d_seconds_bucket{le="1"} 8000`, "d_seconds_count 8000", "d_seconds_sum 4000"} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no line %s in:\n%s", line, out)
		}
	}
}

func BenchmarkScrape(b *testing.B) {
	r := NewRegistry()
	c := NewCounterVec("n_total", "N.", "k")
	h := NewHistogramVec("d_seconds", "D.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "source")
	for _, k := range []string{"a", "b", "c"} {
		c.With(k).Inc()
		h.With(k).Observe(0.1)
	}
	r.MustRegister(c, h)
	for b.Loop() {
		exposition(r)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := NewHistogramVec("d_seconds", "D.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "source").With("cold")
	for b.Loop() {
		h.Observe(0.02)
	}
}
