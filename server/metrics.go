package server

import "github.com/cordon-sandbox/cordon/metrics"

type daemonMetrics struct {
	create  *metrics.HistogramVec
	exec    *metrics.Histogram
	destroy *metrics.Histogram
	reaped  *metrics.CounterVec
}

// latencyBuckets span a warm claim (about a millisecond) to a slow image
// pull.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg *metrics.Registry, s *Server) (*daemonMetrics, error) {
	exec := metrics.NewHistogramVec("cordon_exec_seconds", "Duration of exec streams through the API.", latencyBuckets)
	destroy := metrics.NewHistogramVec("cordon_sandbox_destroy_seconds", "Time to a confirmed teardown.", latencyBuckets)
	m := &daemonMetrics{
		create:  metrics.NewHistogramVec("cordon_sandbox_create_seconds", "Time from a create request to a ready sandbox, by source (cold or pool).", latencyBuckets, "source"),
		exec:    exec.With(),
		destroy: destroy.With(),
		reaped:  metrics.NewCounterVec("cordon_sandboxes_reaped_total", "Sandboxes the daemon ended itself, by reason (ttl, idle, lost, restart, retry).", "reason"),
	}
	live := metrics.NewGaugeFunc("cordon_sandboxes_live", "Sandboxes the daemon holds.", nil, func(set func(float64, ...string)) {
		s.mu.Lock()
		defer s.mu.Unlock()
		set(float64(len(s.live)))
	})
	// By tier and state, and the pools' sizes: read at each scrape.
	byState := metrics.NewGaugeFunc("cordon_sandboxes", "Sandboxes by tier and state.", []string{"tier", "state"}, func(set func(float64, ...string)) {
		counts := map[[2]string]int{}
		s.mu.Lock()
		for _, e := range s.live {
			counts[[2]string{e.rec.Spec.Tier, e.rec.State}]++
		}
		s.mu.Unlock()
		for k, n := range counts {
			set(float64(n), k[0], k[1])
		}
	})
	// Each pool's ready count or target, by pick.
	pools := func(pick func(ready, target int) int) func(set func(float64, ...string)) {
		return func(set func(float64, ...string)) {
			for _, p := range s.poolList() {
				set(float64(pick(p.sizes())), p.spec.Name)
			}
		}
	}
	ready := metrics.NewGaugeFunc("cordon_pool_ready", "Ready sandboxes in each warm pool.", []string{"pool"}, pools(func(ready, _ int) int { return ready }))
	target := metrics.NewGaugeFunc("cordon_pool_size", "Target size of each warm pool.", []string{"pool"}, pools(func(_, target int) int { return target }))
	if err := reg.Register(m.create, exec, destroy, m.reaped, live, byState, ready, target); err != nil {
		return nil, err
	}
	return m, nil
}
