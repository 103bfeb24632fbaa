package process

import "time"

// The pool of prestarted inits (Config.Prestart): each a started init
// waiting for its configuration, so that a create skips the clone, the exec
// and the Go runtime's start.

// takeSlot hands out a prestarted init, if the pool has one. The pool is
// refilled once creates pause for refillDelay: a new init's start-up would
// otherwise compete for the CPU with the sandboxes just made, and a burst
// of creates gains nothing from a pool that cannot keep up with it.
func (b *Backend) takeSlot(agent string) *slot {
	if b.cfg.Prestart <= 0 {
		return nil
	}
	b.poolMu.Lock()
	defer b.poolMu.Unlock()
	var sl *slot
	for len(b.pool) > 0 && sl == nil {
		sl, b.pool = b.pool[0], b.pool[1:]
		select {
		case <-sl.proc.Exited(): // died while waiting; try the next
			sl.discard()
			sl = nil
		default:
		}
	}
	if b.closed {
		return sl
	}
	if b.refill == nil {
		b.refill = time.AfterFunc(refillDelay, func() { b.fill(agent) })
	} else {
		b.refill.Reset(refillDelay)
	}
	return sl
}

// fill starts the inits the pool lacks.
func (b *Backend) fill(agent string) {
	b.poolMu.Lock()
	need := b.cfg.Prestart - len(b.pool) - b.filling
	if b.closed || need <= 0 {
		b.poolMu.Unlock()
		return
	}
	b.filling += need
	b.fills.Add(need)
	b.poolMu.Unlock()
	for range need {
		go func() {
			defer b.fills.Done()
			attr, _ := b.sysProcAttr()
			s, err := b.newSlot(agent, attr, nil)
			b.poolMu.Lock()
			defer b.poolMu.Unlock()
			b.filling--
			if err != nil {
				return
			}
			if b.closed {
				s.discard()
				return
			}
			b.pool = append(b.pool, s)
		}()
	}
}

// refillDelay is the pause in creates after which the pool refills.
const refillDelay = 100 * time.Millisecond

// Close ends the prestarted inits the pool holds, and those on their way:
// when it returns, none is left.
func (b *Backend) Close() error {
	b.poolMu.Lock()
	pool := b.pool
	b.pool, b.closed = nil, true
	if b.refill != nil {
		b.refill.Stop()
	}
	b.poolMu.Unlock()
	b.fills.Wait()
	for _, sl := range pool {
		sl.discard()
	}
	return nil
}
