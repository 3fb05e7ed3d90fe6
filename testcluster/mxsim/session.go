package mxsim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// mxEndReason is why a session ended; it decides how its event stream
// ends.
type mxEndReason int

const (
	mxOpen        mxEndReason = iota
	mxEndClosed               // CloseSession: the stream ends OK
	mxEndGraceful             // EndStreams: the stream ends OK
	mxEndKilled               // Kill or Close: the connection is gone anyway
	mxEndOverflow             // the event queue overflowed: a fault
)

// mxAdvise is how an item is advised.
type mxAdvise int

const (
	mxNotAdvised mxAdvise = iota
	mxAdvisedPlain
	mxAdvisedSupervisory
)

// mxItem is an item added on a session's server handle.
type mxItem struct {
	handle int32
	addr   string
	advise mxAdvise
}

// mxCall is one Invoke waiting for, or on, the session's worker.
type mxCall struct {
	ctx   context.Context // ends when the caller gives up: then the command is dropped if not started
	kind  string
	cmd   *mxpb.MxCommand
	corr  string
	reply chan *mxpb.MxCommandReply // buffered: the worker never waits for a caller that left
}

// mxSession is a gateway session: its settings from the time it opened, a
// command queue drained by one worker goroutine, and an event queue
// drained by at most one StreamEvents.
type mxSession struct {
	g         *Gateway
	id        string
	client    string
	writeUser int32
	timeout   time.Duration
	heartbeat time.Duration
	bulkSup   bool // the gateway advertised CapBulkSubscribeSupervisory at open
	resumable bool // the gateway advertised CapEventResume at open
	ping      bool // the gateway advertised CapPing at open
	beats     bool // the gateway advertised CapHeartbeat at open
	window    time.Duration

	cmds       chan *mxCall       // capacity MaxPending: pending is checked first, so a send never blocks
	events     chan *mxpb.MxEvent // the event queue; a full one faults the session
	done       chan struct{}      // closed when the session ends
	workerDone chan struct{}

	mu         sync.Mutex
	ended      mxEndReason
	seq        uint64 // the last worker_sequence given
	pending    int    // commands accepted and not finished, the running one included
	running    int
	subscribed bool
	takeover   chan struct{} // closed to make the subscriber leave
	subLeft    chan struct{} // closed when it left
	orphan     *time.Timer   // ends the session when its resume window passes without a subscriber
	// sent holds the last events sent, oldest first, for a subscriber
	// that resumes after a broken stream (CapEventResume): a sent event
	// may be lost in transit.
	sent     []*mxpb.MxEvent
	server   int32 // the server handle, 0 until Register
	nextItem int32
	items    map[int32]*mxItem
	byAddr   map[string]*mxItem
}

func (s *mxSession) openReply(gatewayID string, caps []string) *mxpb.OpenSessionReply {
	return &mxpb.OpenSessionReply{
		SessionId:              s.id,
		GatewayId:              gatewayID,
		Capabilities:           append([]string(nil), caps...),
		DefaultCommandTimeout:  durationpb.New(s.timeout),
		HeartbeatInterval:      durationpb.New(s.heartbeat),
		GatewayProtocolVersion: ProtocolVersion,
	}
}

// end ends the session for reason; ending an ended session does nothing.
func (s *mxSession) end(reason mxEndReason) {
	s.mu.Lock()
	s.endLocked(reason)
	s.mu.Unlock()
}

// endLocked ends the session. The gateway forgets it at its next look-up,
// so that no path that ends a session needs the gateway's lock.
func (s *mxSession) endLocked(reason mxEndReason) {
	if s.ended != mxOpen {
		return
	}
	s.ended = reason
	close(s.done)
	if reason == mxEndOverflow {
		s.g.stats.fault()
		s.g.log.Info().Str("session", s.id).Int("queue", cap(s.events)).
			Msg("mxsim: session faulted: event queue overflow")
	} else {
		s.g.log.Debug().Str("session", s.id).Msg("mxsim: session ended")
	}
}

func (s *mxSession) endReason() mxEndReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// ---- commands ----

// submit queues c for the worker, or refuses it.
func (s *mxSession) submit(c *mxCall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != mxOpen {
		return status.Errorf(codes.NotFound, "session %s ended", s.id)
	}
	if s.pending >= MaxPending {
		s.g.stats.refuse()
		return status.Errorf(codes.ResourceExhausted, "session %s has %d commands pending", s.id, s.pending)
	}
	s.pending++
	s.g.stats.pendingNow(s.pending)
	s.cmds <- c
	return nil
}

// work is the session's worker: it runs the queued commands one at a
// time, as the MXAccess apartment does, until the session ends.
func (s *mxSession) work() {
	defer s.g.workers.Done()
	defer close(s.workerDone)
	for {
		select {
		case <-s.done:
			return
		case c := <-s.cmds:
			s.run(c)
		}
	}
}

// run runs one command unless its caller gave up before the worker got to
// it. A command that has started runs to completion, even if its caller
// times out meanwhile, as on the real worker.
func (s *mxSession) run(c *mxCall) {
	if c.ctx.Err() != nil || s.endReason() != mxOpen {
		s.finished(0)
		s.g.stats.drop()
		s.g.log.Debug().Str("session", s.id).Str("kind", c.kind).Msg("mxsim: command dropped unrun: its caller gave up")
		return
	}
	if hook := s.g.commandHook(); hook != nil {
		hook(s.id, c.kind)
	}
	s.mu.Lock()
	s.running++
	s.g.stats.concurrentNow(s.running)
	s.mu.Unlock()
	if !s.delay() {
		s.finished(1)
		return // the session ended: the process is gone, so is the command
	}
	rep := s.execute(c)
	s.g.stats.command(c.kind)
	// The command leaves the queue before its caller hears of it, so that
	// a caller that sends its next command at once finds room.
	s.finished(1)
	c.reply <- rep
}

// finished takes a command off the pending count, and off the running
// count if it ran.
func (s *mxSession) finished(ran int) {
	s.mu.Lock()
	s.pending--
	s.running -= ran
	s.mu.Unlock()
}

// delay waits the command latency, following every change of it at once.
// It returns false if the session ended meanwhile.
func (s *mxSession) delay() bool {
	start := time.Now()
	for {
		d, changed := s.g.commandLatency()
		left := d - time.Since(start)
		if left <= 0 {
			return true
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			return true
		case <-changed:
			t.Stop()
		case <-s.done:
			t.Stop()
			return false
		}
	}
}

// ---- events ----

// enqueueLocked numbers ev and queues it for the subscriber. A full queue
// faults the session: a gateway cannot hold events for a client that
// does not take them. s.mu is held.
func (s *mxSession) enqueueLocked(ev *mxpb.MxEvent) {
	if s.ended != mxOpen {
		return
	}
	s.seq++
	ev.SessionId, ev.WorkerSequence = s.id, s.seq
	select {
	case s.events <- ev:
	default:
		s.endLocked(mxEndOverflow)
	}
}

// dataEventLocked queues an OnDataChange of item it. s.mu is held.
func (s *mxSession) dataEventLocked(it *mxItem, smp *mxSample) {
	s.enqueueLocked(&mxpb.MxEvent{Event: &mxpb.MxEvent_OnDataChange{OnDataChange: &mxpb.OnDataChange{
		ServerHandle: s.server,
		ItemHandle:   it.handle,
		Value:        toMxValue(smp.v),
		Quality:      smp.quality,
		Timestamp:    timestamppb.New(smp.at),
	}}})
}

// dataChanged queues an event for every item of batch the session
// advised. The data's lock is held.
func (s *mxSession) dataChanged(batch []*mxSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, smp := range batch {
		if s.ended != mxOpen {
			return
		}
		if it := s.byAddr[smp.addr]; it != nil && it.advise != mxNotAdvised {
			s.dataEventLocked(it, smp)
		}
	}
}

// subscribe makes the caller the session's one subscriber. A subscriber
// that resumes (after > 0) on a gateway that resumes streams takes over
// from one still registered: its client lost that stream, the gateway may
// not have noticed yet. It returns the channel that tells the caller it
// was taken over.
func (s *mxSession) subscribe(resume bool) (<-chan struct{}, error) {
	s.mu.Lock()
	if s.ended != mxOpen {
		s.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "session %s ended", s.id)
	}
	if s.subscribed && !(resume && s.resumable) {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "session %s already has an event subscriber", s.id)
	}
	if s.subscribed {
		close(s.takeover)
		left := s.subLeft
		s.mu.Unlock()
		select {
		case <-left:
		case <-time.After(5 * time.Second):
			return nil, status.Errorf(codes.FailedPrecondition, "session %s: the old subscriber did not leave", s.id)
		}
		s.mu.Lock()
		if s.ended != mxOpen || s.subscribed {
			s.mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "session %s already has an event subscriber", s.id)
		}
	}
	s.subscribed = true
	if s.orphan != nil {
		s.orphan.Stop()
		s.orphan = nil
	}
	s.takeover, s.subLeft = make(chan struct{}), make(chan struct{})
	stop := s.takeover
	s.mu.Unlock()
	return stop, nil
}

func (s *mxSession) unsubscribe() {
	s.mu.Lock()
	s.subscribed = false
	close(s.subLeft)
	s.armOrphanLocked()
	s.mu.Unlock()
}

// armOrphanLocked starts the session's resume window, on a gateway that
// has one: the client may be gone for good, and the session is kept for
// the window only. A subscriber that comes in time stops it. s.mu is
// held.
func (s *mxSession) armOrphanLocked() {
	if s.window <= 0 || s.ended != mxOpen {
		return
	}
	s.orphan = time.AfterFunc(s.window, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.subscribed && s.ended == mxOpen {
			s.g.log.Debug().Str("session", s.id).Msg("mxsim: session's resume window passed without a subscriber")
			s.endLocked(mxEndClosed)
		}
	})
}

// stream sends the session's events to out until the session ends or the
// client goes, with a Heartbeat whenever the stream was idle for the
// heartbeat interval.
func (s *mxSession) stream(out grpc.ServerStreamingServer[mxpb.MxEvent], after uint64) error {
	if after > 0 {
		s.g.stats.add(func(st *Stats) { st.ResumeRequests++ })
	}
	takenOver, err := s.subscribe(after > 0)
	if err != nil {
		return err
	}
	defer s.unsubscribe()
	if after > 0 {
		replay, err := s.replayAfter(after)
		if err != nil {
			return err
		}
		for _, ev := range replay {
			if err := out.Send(ev); err != nil {
				return err
			}
		}
	}
	var beat <-chan time.Time
	var timer *time.Timer
	if s.heartbeat > 0 && s.beats {
		timer = time.NewTimer(s.heartbeat)
		defer timer.Stop()
		beat = timer.C
	}
	ctx := out.Context()
	for {
		// An ended session ends the stream before it sends what is
		// queued: a fault is reported before the events it cost.
		select {
		case <-s.done:
			return s.finish(out)
		default:
		}
		select {
		case ev := <-s.events:
			// Kept whether it went or not: taken off the queue, it is
			// the replay's to deliver now.
			s.keepSent(ev)
			if err := out.Send(ev); err != nil {
				return err
			}
			if timer != nil {
				timer.Reset(s.heartbeat)
			}
		case <-beat:
			// Queued like any event, so that worker_sequence stays in
			// order; it is sent on the next turn, which resets the timer.
			s.mu.Lock()
			s.enqueueLocked(&mxpb.MxEvent{Event: &mxpb.MxEvent_Heartbeat{Heartbeat: &mxpb.Heartbeat{At: timestamppb.Now()}}})
			s.mu.Unlock()
		case <-s.done:
			return s.finish(out)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-takenOver:
			return status.Errorf(codes.Aborted, "session %s: another subscriber resumed the stream", s.id)
		}
	}
}

// ReplaySize is how many sent events a session keeps for a subscriber
// that resumes.
const ReplaySize = 10000

// keepSent remembers ev for a resume, on a gateway that offers one.
func (s *mxSession) keepSent(ev *mxpb.MxEvent) {
	if !s.resumable {
		return
	}
	s.mu.Lock()
	if len(s.sent) >= ReplaySize {
		// Drop the oldest quarter at once: amortised, not a copy per event.
		s.sent = append(s.sent[:0], s.sent[ReplaySize/4:]...)
	}
	s.sent = append(s.sent, ev)
	s.mu.Unlock()
}

// replayAfter returns the sent events after worker sequence after, or
// OUT_OF_RANGE when some of them are no longer held (or the gateway does
// not resume).
func (s *mxSession) replayAfter(after uint64) ([]*mxpb.MxEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.resumable {
		return nil, status.Errorf(codes.OutOfRange, "session %s: this gateway does not resume streams", s.id)
	}
	var last uint64
	if n := len(s.sent); n > 0 {
		last = s.sent[n-1].GetWorkerSequence()
	}
	if after >= last {
		return nil, nil // nothing sent since
	}
	first := s.sent[0].GetWorkerSequence()
	if after+1 < first {
		return nil, status.Errorf(codes.OutOfRange, "session %s: cannot resume after %d: events %d-%d are no longer held",
			s.id, after, after+1, first-1)
	}
	i := int(after + 1 - first)
	return append([]*mxpb.MxEvent(nil), s.sent[i:]...), nil
}

// finish ends the stream of an ended session as the reason demands.
func (s *mxSession) finish(out grpc.ServerStreamingServer[mxpb.MxEvent]) error {
	switch s.endReason() {
	case mxEndOverflow:
		s.mu.Lock()
		s.seq++
		ev := &mxpb.MxEvent{SessionId: s.id, WorkerSequence: s.seq, Event: &mxpb.MxEvent_Fault{Fault: &mxpb.SessionFault{
			Kind:    mxpb.SessionFaultKind_SESSION_FAULT_KIND_EVENT_QUEUE_OVERFLOW,
			Message: "event queue overflow: the subscriber fell behind",
		}}}
		s.mu.Unlock()
		_ = out.Send(ev) // best effort: the client may be what is stuck
		return status.Errorf(codes.ResourceExhausted, "session %s faulted: event queue of %d overflowed", s.id, cap(s.events))
	case mxEndKilled:
		return status.Error(codes.Unavailable, "gateway stopped")
	}
	// A graceful end delivers what was queued first. Nothing is queued
	// after the end.
	for {
		select {
		case ev := <-s.events:
			if err := out.Send(ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// ---- the gRPC service ----

// mxService is the gateway's gRPC face, kept apart so that Gateway's
// own methods are the test controls only.
type mxService struct {
	mxpb.UnimplementedMxAccessGatewayServer
	g *Gateway
}

// OpenSession opens a session with the request's command timeout, or the
// gateway's default.
func (x *mxService) OpenSession(_ context.Context, req *mxpb.OpenSessionRequest) (*mxpb.OpenSessionReply, error) {
	var timeout time.Duration
	if ct := req.GetCommandTimeout(); ct != nil {
		if err := ct.CheckValid(); err != nil || ct.AsDuration() <= 0 {
			return nil, status.Errorf(codes.InvalidArgument, "command_timeout %v: must be positive", ct.AsDuration())
		}
		timeout = ct.AsDuration()
	}
	s, rep := x.g.newSession(req.GetClientName(), req.GetWriteUserId(), timeout)
	x.g.log.Debug().Str("session", s.id).Str("client", s.client).Int32("user", s.writeUser).
		Dur("timeout", s.timeout).Msg("mxsim: session opened")
	return rep, nil
}

// CloseSession ends a session; its event stream ends OK.
func (x *mxService) CloseSession(_ context.Context, req *mxpb.CloseSessionRequest) (*mxpb.CloseSessionReply, error) {
	s := x.g.session(req.GetSessionId())
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "no session %q", req.GetSessionId())
	}
	s.end(mxEndClosed)
	return &mxpb.CloseSessionReply{}, nil
}

// Invoke queues the command on the session's worker and waits for its
// reply, for at most the session's command timeout.
func (x *mxService) Invoke(ctx context.Context, req *mxpb.MxCommandRequest) (*mxpb.MxCommandReply, error) {
	s := x.g.session(req.GetSessionId())
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "no session %q", req.GetSessionId())
	}
	kind := mxKind(req.GetCommand())
	if kind == "" {
		return nil, status.Error(codes.InvalidArgument, "no command")
	}
	if kind == "Ping" && !s.ping {
		// A gateway without PingCommand does not know its field: to it
		// the command is empty.
		x.g.stats.add(func(st *Stats) { st.Unadvertised[kind]++ })
		return nil, status.Error(codes.InvalidArgument, "no command")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := &mxCall{ctx: cctx, kind: kind, cmd: req.GetCommand(), corr: req.GetClientCorrelationId(), reply: make(chan *mxpb.MxCommandReply, 1)}
	if err := s.submit(c); err != nil {
		return nil, err
	}
	select {
	case rep := <-c.reply:
		return rep, nil
	case <-s.done:
		select {
		case rep := <-c.reply:
			return rep, nil // it finished as the session ended
		default:
		}
		return nil, status.Errorf(codes.NotFound, "session %s ended before its %s command finished", s.id, kind)
	case <-cctx.Done():
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			x.g.stats.deadline()
			return nil, status.Errorf(codes.DeadlineExceeded, "%s command did not finish within the session's command timeout (%v)", kind, s.timeout)
		}
		x.g.stats.cancel()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// StreamEvents delivers a session's events to its one subscriber.
func (x *mxService) StreamEvents(req *mxpb.StreamEventsRequest, out grpc.ServerStreamingServer[mxpb.MxEvent]) error {
	s := x.g.session(req.GetSessionId())
	if s == nil {
		return status.Errorf(codes.NotFound, "no session %q", req.GetSessionId())
	}
	return s.stream(out, req.GetResumeAfter())
}
