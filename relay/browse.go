package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/rs/zerolog"
)

// browseTimeout bounds the expansion of a source's browse roots on one
// server.
const browseTimeout = 30 * time.Second

// Browse retries back off from browseRetryMin to browseRetryMax: a pair
// whose servers are down for maintenance is asked again soon after, and
// not hammered while they stay down.
const (
	browseRetryMin = time.Second
	browseRetryMax = 30 * time.Second
)

// browser expands the browse roots of a relay's sources in the background,
// after the bridge has started: a source's servers may be down at start,
// and that must hold up neither the relay nor its other sources. The tags
// it finds are added to the running bridge, where they are subscribed like
// the listed ones.
type browser struct {
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[string]string // source -> what its browse waits for
}

// browseJob is one source's browse: its config and the tags listed in it.
type browseJob struct {
	sc     SourceConfig
	listed []bridge.TagConfig
}

func newBrowser(log zerolog.Logger) *browser {
	ctx, cancel := context.WithCancel(context.Background())
	return &browser{log: log, ctx: ctx, cancel: cancel, pending: map[string]string{}}
}

// start browses every job's roots until they are expanded, each on a
// goroutine of its own, and adds what it finds to b.
func (br *browser) start(b *bridge.Bridge, jobs []browseJob) {
	for _, j := range jobs {
		br.setPending(j.sc.Name, "browsing its servers for tags")
		br.wg.Add(1)
		go func() {
			defer br.wg.Done()
			br.run(b, j)
		}()
	}
}

func (br *browser) run(b *bridge.Bridge, j browseJob) {
	log := br.log.With().Str("source", j.sc.Name).Logger()
	wait := browseRetryMin
	for {
		found, ns, err := browse(br.ctx, j.sc, func(msg string) { log.Warn().Msg(msg) })
		if br.ctx.Err() != nil {
			return
		}
		if err == nil {
			tags, dup := newBrowsedTags(j.listed, found, ns)
			log.Info().Int("browsed", len(found)).Int("already_listed", dup).Msg("browse roots expanded")
			if err := b.AddTags(br.ctx, j.sc.Name, tags); err != nil {
				// The servers answered, and the relay refuses what
				// they hold (a subject clash, a stream that does not
				// capture it): asking again finds the same.
				log.Error().Err(err).Msg("browsed tags refused")
				br.setPending(j.sc.Name, "browsed tags refused: "+err.Error())
				return
			}
			br.setPending(j.sc.Name, "")
			return
		}
		log.Warn().Err(err).Dur("retry_in_ms", wait).Msg("browse roots not expanded; trying again")
		br.setPending(j.sc.Name, fmt.Sprintf("browsing its servers for tags (last error: %v)", err))
		t := time.NewTimer(wait)
		select {
		case <-br.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, browseRetryMax)
	}
}

// newBrowsedTags returns the browsed tags a source does not list already,
// and how many it does: a listed tag wins over a browsed one of the same
// name or node, so that one node is relayed once.
func newBrowsedTags(listed, found []bridge.TagConfig, ns []string) ([]bridge.TagConfig, int) {
	names, nodes := map[string]bool{}, map[string]bool{}
	for _, t := range listed {
		names[t.Name], nodes[opcuasource.ByNamespaceURI(t.Address, ns)] = true, true
	}
	var out []bridge.TagConfig
	dup := 0
	for _, t := range found {
		if names[t.Name] || nodes[t.Address] {
			dup++
			continue
		}
		out = append(out, t)
	}
	return out, dup
}

func (br *browser) setPending(source, what string) {
	br.mu.Lock()
	defer br.mu.Unlock()
	if what == "" {
		delete(br.pending, source)
		return
	}
	br.pending[source] = what
}

// waiting returns, one line per source in name order, what each
// unfinished browse waits for.
func (br *browser) waiting() []string {
	br.mu.Lock()
	defer br.mu.Unlock()
	out := make([]string, 0, len(br.pending))
	for _, name := range slices.Sorted(maps.Keys(br.pending)) {
		out = append(out, fmt.Sprintf("source %s: %s", name, br.pending[name]))
	}
	return out
}

// close stops every browse and waits for it.
func (br *browser) close() {
	br.cancel()
	br.wg.Wait()
}

// browse expands the browse roots on the first endpoint that answers.
func browse(ctx context.Context, sc SourceConfig, warn func(string)) ([]bridge.TagConfig, []string, error) {
	var errs []error
	for i, ep := range sc.Endpoints {
		bctx, cancel := context.WithTimeout(ctx, browseTimeout)
		opts, err := sc.Security.ClientOptions(bctx, i, ep)
		if err != nil {
			cancel()
			errs = append(errs, err)
			continue
		}
		tags, ns, err := opcuasource.BrowseTags(bctx, ep, sc.Browse, warn, opts...)
		cancel()
		if err == nil {
			return tags, ns, nil
		}
		errs = append(errs, err)
	}
	return nil, nil, errors.Join(errs...)
}
