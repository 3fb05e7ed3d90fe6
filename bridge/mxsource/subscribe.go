package mxsource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/mxgateway"
)

// errSessionChanged reports a subscribe whose session ended while it ran.
var errSessionChanged = errors.New("the gateway session ended during the subscribe")

// subscribeOn adds the items on m's session gen and, with advise, advises
// them, with as few commands as the gateway allows:
//
//   - a supervisory session on a gateway with "bulk-subscribe-supervisory":
//     one SubscribeBulk(supervisory=true);
//   - a supervisory session on a gateway without it: one AddItemBulk for
//     the items not yet added, then one AdviseSupervisory per item,
//     SubscribeParallelism in flight (never a supervisory bulk request,
//     which such a gateway would advise plainly, breaking writes);
//   - a session with a write user: one AdviseItemBulk for items already
//     added, one SubscribeBulk(supervisory=false) for the others.
//
// Without advise (a warm standby) it is one AddItemBulk. It returns one
// error per item, nil for an item done, or an error of its own when the
// request as a whole failed.
//
// Items go in batches of SubscribeBatchSize, one after the other: the
// gateway sends each advised item's current value at once, and a batch
// larger than its event queue (10,000) would overflow it and fault the
// session.
func (s *Source) subscribeOn(ctx context.Context, m *member, sess *mxgateway.Session, gen uint64, items []*item, advise bool) ([]error, error) {
	if sess == nil {
		return nil, errors.New("no gateway session")
	}
	m.busy.Add(1)
	defer m.busy.Add(-1)
	errs := make([]error, 0, len(items))
	for start := 0; start < len(items); start += s.cfg.SubscribeBatchSize {
		batch := items[start:min(start+s.cfg.SubscribeBatchSize, len(items))]
		e, err := s.subscribeBatch(ctx, m, sess, gen, batch, advise)
		if err != nil {
			return nil, err
		}
		errs = append(errs, e...)
	}
	return errs, nil
}

// subscribeBatch is subscribeOn for one batch.
func (s *Source) subscribeBatch(ctx context.Context, m *member, sess *mxgateway.Session, gen uint64, items []*item, advise bool) ([]error, error) {
	errs := make([]error, len(items))
	s.mu.Lock()
	var fresh, added []int // indexes into items
	for i, it := range items {
		if it.handle[m.idx] == 0 {
			fresh = append(fresh, i)
		} else {
			added = append(added, i)
		}
	}
	s.mu.Unlock()
	addrs := func(idx []int) []string {
		out := make([]string, len(idx))
		for k, i := range idx {
			out[k] = items[i].tag.Address
		}
		return out
	}
	record := func(idx []int, res []mxgateway.ItemResult, advised bool) error {
		var es, held []early
		defer func() { s.replayEarly(m, gen, es) }()
		// emitMu from before the mapping until the held changes are
		// relayed: a change that comes meanwhile follows them.
		s.emitMu.Lock()
		defer s.emitMu.Unlock()
		s.mu.Lock()
		if m.gen != gen {
			s.mu.Unlock()
			return errSessionChanged
		}
		for k, i := range idx {
			it := items[i]
			if res[k].Err != nil {
				errs[i] = res[k].Err
				continue
			}
			if old := it.handle[m.idx]; old != 0 && old != res[k].Handle {
				delete(m.byGateway, old)
			}
			it.handle[m.idx] = res[k].Handle
			it.advised[m.idx] = it.advised[m.idx] || advised
			m.byGateway[res[k].Handle] = it.tag.Handle
			if d, ok := m.early[res[k].Handle]; ok {
				delete(m.early, res[k].Handle)
				es = append(es, early{it.tag.Handle, d})
			}
		}
		// A resumed session's changes of the items mapped now, held
		// since the resume (see member.held).
		held = s.takeHeldLocked(m)
		s.mu.Unlock()
		for _, e := range held {
			s.emitLocked(m, gen, e.handle, e.d)
		}
		return nil
	}
	supervisory := sess.Supervisory()
	switch {
	case !advise:
		if len(fresh) == 0 {
			return errs, nil
		}
		s.count(1)
		res, err := sess.AddItems(ctx, addrs(fresh))
		if err != nil {
			return nil, err
		}
		return errs, record(fresh, res, false)
	case supervisory && sess.Has(mxgateway.CapBulkSubscribeSupervisory):
		all := append(fresh, added...)
		s.count(1)
		res, err := sess.SubscribeBulk(ctx, addrs(all), true)
		if err != nil {
			return nil, err
		}
		return errs, record(all, res, true)
	case supervisory:
		if len(fresh) > 0 {
			s.count(1)
			res, err := sess.AddItems(ctx, addrs(fresh))
			if err != nil {
				return nil, err
			}
			if err := record(fresh, res, false); err != nil {
				return nil, err
			}
		}
		return s.adviseEach(ctx, m, sess, gen, items, errs)
	default:
		if len(added) > 0 {
			s.mu.Lock()
			handles := make([]int32, len(added))
			for k, i := range added {
				handles[k] = items[i].handle[m.idx]
			}
			s.mu.Unlock()
			s.count(1)
			res, err := sess.AdviseBulk(ctx, handles)
			if err != nil {
				return nil, err
			}
			for k := range res {
				res[k].Handle = handles[k]
			}
			if err := record(added, res, true); err != nil {
				return nil, err
			}
		}
		if len(fresh) > 0 {
			s.count(1)
			res, err := sess.SubscribeBulk(ctx, addrs(fresh), false)
			if err != nil {
				return nil, err
			}
			if err := record(fresh, res, true); err != nil {
				return nil, err
			}
		}
		return errs, nil
	}
}

// adviseEach advises every added, not yet advised item supervisory, one
// command per item with SubscribeParallelism in flight. The first error
// of the command path (the session gone, a timeout) stops the rest: the
// guard retries them.
func (s *Source) adviseEach(ctx context.Context, m *member, sess *mxgateway.Session, gen uint64, items []*item, errs []error) ([]error, error) {
	type job struct {
		i      int
		handle int32
	}
	var jobs []job
	s.mu.Lock()
	for i, it := range items {
		if errs[i] == nil && it.handle[m.idx] != 0 && !it.advised[m.idx] {
			jobs = append(jobs, job{i, it.handle[m.idx]})
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.SubscribeParallelism)
	for _, j := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.count(1)
			err := sess.AdviseSupervisory(ctx, j.handle)
			var se *mxgateway.StatusError
			switch {
			case err == nil:
				s.mu.Lock()
				if m.gen == gen {
					items[j.i].advised[m.idx] = true
				}
				s.mu.Unlock()
			case errors.As(err, &se):
				errs[j.i] = err // this item only
			default:
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.gen != gen {
		return nil, errSessionChanged
	}
	return errs, nil
}

func (s *Source) count(n uint64) {
	s.mu.Lock()
	s.stats.Commands += n
	s.mu.Unlock()
}

func (s *Source) wakeStandby() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Standby preparation follows the bridge guard's rules: one request in
// flight, a jittered backoff from prepFloor to prepCeiling after a failure.
const (
	prepFloor   = time.Second
	prepCeiling = 60 * time.Second
)

// prepareStandby keeps the standby's items added (warm) or advised (hot),
// one request at a time, so that a promotion finds them there.
func (s *Source) prepareStandby() {
	defer s.wg.Done()
	delay := prepFloor
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		for s.ctx.Err() == nil {
			s.mu.Lock()
			m := s.standby()
			var todo []*item
			var sess *mxgateway.Session
			var gen uint64
			hot := s.cfg.Mode == ModeHot
			if m != nil {
				sess, gen = m.sess, m.gen
				for _, it := range s.items {
					if it.handle[m.idx] == 0 || (hot && !it.advised[m.idx]) {
						todo = append(todo, it)
					}
				}
			}
			s.mu.Unlock()
			if len(todo) == 0 {
				break
			}
			res, err := s.subscribeOn(s.ctx, m, sess, gen, todo, hot)
			if err == nil {
				failed := 0
				for _, e := range res {
					if e != nil {
						failed++
					}
				}
				if failed == 0 {
					delay = prepFloor
					s.log.Debug().Str("endpoint", m.target).Int("items", len(todo)).Bool("hot", hot).Msg("standby prepared")
					break
				}
				err = fmt.Errorf("%d of %d items failed, e.g. %v", failed, len(todo), firstErr(res))
			}
			if s.ctx.Err() != nil {
				return
			}
			s.log.Warn().Str("endpoint", m.target).Err(err).Dur("retry_in_ms", delay).Msg("standby not prepared")
			if ctxtime.Sleep(s.ctx, jitter(delay)) != nil {
				return
			}
			delay = min(delay*2, prepCeiling)
		}
	}
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
