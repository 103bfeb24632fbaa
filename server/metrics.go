package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	create  *prometheus.HistogramVec
	exec    prometheus.Histogram
	destroy prometheus.Histogram
	reaped  *prometheus.CounterVec
	handler http.Handler
}

// latencyBuckets span a warm claim (about a millisecond) to a slow image
// pull.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg *prometheus.Registry, s *Server) (*metrics, error) {
	m := &metrics{
		create: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cordon_sandbox_create_seconds", Help: "Time from a create request to a ready sandbox, by source (cold or pool).", Buckets: latencyBuckets,
		}, []string{"source"}),
		exec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cordon_exec_seconds", Help: "Duration of exec streams through the API.", Buckets: latencyBuckets,
		}),
		destroy: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cordon_sandbox_destroy_seconds", Help: "Time to a confirmed teardown.", Buckets: latencyBuckets,
		}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cordon_sandboxes_reaped_total", Help: "Sandboxes the daemon ended itself, by reason (ttl, idle, lost, restart, retry).",
		}, []string{"reason"}),
	}
	sandboxes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cordon_sandboxes_live", Help: "Sandboxes the daemon holds."}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.live))
	})
	for _, c := range []prometheus.Collector{m.create, m.exec, m.destroy, m.reaped, sandboxes, &stateCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m, nil
}

func (m *metrics) serve(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// stateCollector reports sandboxes by tier and state, and pool sizes, at
// scrape time.
type stateCollector struct{ s *Server }

var (
	descByState = prometheus.NewDesc("cordon_sandboxes", "Sandboxes by tier and state.", []string{"tier", "state"}, nil)
	descPool    = prometheus.NewDesc("cordon_pool_ready", "Ready sandboxes in each warm pool.", []string{"pool"}, nil)
	descPoolCap = prometheus.NewDesc("cordon_pool_size", "Target size of each warm pool.", []string{"pool"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descByState
	ch <- descPool
	ch <- descPoolCap
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counts := map[[2]string]int{}
	s.mu.Lock()
	for _, e := range s.live {
		counts[[2]string{e.rec.Spec.Tier, e.rec.State}]++
	}
	pools := make([]*pool, 0, len(s.pools))
	for _, p := range s.pools {
		pools = append(pools, p)
	}
	s.mu.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descByState, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for _, p := range pools {
		ready, size := p.sizes()
		ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(ready), p.spec.Name)
		ch <- prometheus.MustNewConstMetric(descPoolCap, prometheus.GaugeValue, float64(size), p.spec.Name)
	}
}
