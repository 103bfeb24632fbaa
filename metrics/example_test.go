package metrics_test

import (
	"bytes"
	"fmt"

	"github.com/cordon-sandbox/cordon/metrics"
)

func Example() {
	reg := metrics.NewRegistry()
	decided := metrics.NewCounterVec("cordon_egress_decisions_total", "Egress decisions, by outcome.", "decision")
	waits := metrics.NewHistogramVec("cordon_exec_seconds", "Duration of exec streams.", []float64{0.01, 0.1, 1})
	reg.MustRegister(decided, waits)

	decided.With("allowed").Inc()
	waits.With().Observe(0.05)

	var b bytes.Buffer
	reg.Write(&b) // or serve reg: it is an http.Handler
	fmt.Print(b.String())
	// Output:
	// # HELP cordon_egress_decisions_total Egress decisions, by outcome.
	// # TYPE cordon_egress_decisions_total counter
	// cordon_egress_decisions_total{decision="allowed"} 1
	// # HELP cordon_exec_seconds Duration of exec streams.
	// # TYPE cordon_exec_seconds histogram
	// cordon_exec_seconds_bucket{le="0.01"} 0
	// cordon_exec_seconds_bucket{le="0.1"} 1
	// cordon_exec_seconds_bucket{le="1"} 1
	// cordon_exec_seconds_bucket{le="+Inf"} 1
	// cordon_exec_seconds_sum 0.05
	// cordon_exec_seconds_count 1
}
