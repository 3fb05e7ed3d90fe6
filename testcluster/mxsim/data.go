package mxsim

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// QualityGood is the OPC DA quality of a good value, as MXAccess reports
// it: what Define, RunCounters and a gateway Write give an item.
const QualityGood int32 = 192

// Data is the plant behind MxGateways: items, their values, qualities and
// timestamps. Several gateways can serve one Data, as two gateways in
// front of the same Galaxy serve the same values; a change reaches every
// gateway's sessions that advised the item.
//
// Values are of the Go types an MxValue carries: bool, int32, int64,
// float32, float64, string and time.Time. Another type is a mistake in the
// test and panics.
//
// All methods are safe for concurrent use.
type Data struct {
	// mu is held while a change is handed to the gateways, so that every
	// session sees the changes of an item in the order they were made, and
	// while a gateway advises, so that no change falls between an item's
	// initial value and its first change event. Gateways take their own
	// locks under it, never the other way round.
	mu        sync.Mutex
	items     map[string]*mxSample
	listeners map[*Gateway]struct{}
}

// mxSample is an item's state at one moment. A stored sample is replaced,
// never changed, so that a pointer to it can be read without the lock.
type mxSample struct {
	addr    string
	v       any
	quality int32
	at      time.Time
}

// NewData returns an empty data source.
func NewData() *Data {
	return &Data{items: map[string]*mxSample{}, listeners: map[*Gateway]struct{}{}}
}

// Define creates the item addr (the form is Object.Attribute, but any
// string goes) with value v, good quality and the time now, or resets an
// existing one the same way. Only a defined item can be added to a gateway
// session.
func (d *Data) Define(addr string, v any) { d.Set(addr, v, QualityGood) }

// Set gives item addr value v and quality (OPC DA: 192 good) stamped
// now, and sends the change to every session that advised it, on every
// gateway of d. An item not defined yet is defined by it.
func (d *Data) Set(addr string, v any, quality int32) {
	mustMxType(addr, v)
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &mxSample{addr: addr, v: v, quality: quality, at: time.Now()}
	d.items[addr] = s
	d.notifyLocked([]*mxSample{s})
}

// Get returns item addr's value, quality and timestamp; ok is false for an
// item that was never defined.
func (d *Data) Get(addr string) (v any, quality int32, at time.Time, ok bool) {
	d.mu.Lock()
	s := d.items[addr]
	d.mu.Unlock()
	if s == nil {
		return nil, 0, time.Time{}, false
	}
	return s.v, s.quality, s.at, true
}

// RunCounters defines n int64 items named prefix0.Value, prefix1.Value,
// ... (fmt.Sprintf("%s%d.Value", prefix, i)), starting at 0, and adds 1 to
// every one of them each period, all n in one change with one timestamp,
// as a scan of the plant would. It uses one goroutine whatever n is, so
// that thousands of items cost no more than the work. stop ends it and
// returns once the goroutine is gone; calling it again does nothing.
func (d *Data) RunCounters(prefix string, n int, period time.Duration) (stop func()) {
	if n < 0 || period <= 0 {
		panic(fmt.Sprintf("mxsim: RunCounters(%q, %d, %v): need n >= 0 and a positive period", prefix, n, period))
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("%s%d.Value", prefix, i)
		d.Define(addrs[i], int64(0))
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		var count int64
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			count++
			d.setAll(addrs, count)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// setAll gives every item of addrs the value v, stamped with one time.
func (d *Data) setAll(addrs []string, v int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	batch := make([]*mxSample, len(addrs))
	for i, a := range addrs {
		batch[i] = &mxSample{addr: a, v: v, quality: QualityGood, at: now}
		d.items[a] = batch[i]
	}
	d.notifyLocked(batch)
}

// notifyLocked hands a batch of changes to every gateway. d.mu is held.
func (d *Data) notifyLocked(batch []*mxSample) {
	for g := range d.listeners {
		g.dataChanged(batch)
	}
}

// locked runs f with d.mu held and the current sample of every item, for
// an advise that must see no change slip between the value it reports
// and the registration that gets the next one.
func (d *Data) locked(f func(current func(addr string) *mxSample)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(func(addr string) *mxSample { return d.items[addr] })
}

func (d *Data) addListener(g *Gateway) {
	d.mu.Lock()
	d.listeners[g] = struct{}{}
	d.mu.Unlock()
}

func (d *Data) removeListener(g *Gateway) {
	d.mu.Lock()
	delete(d.listeners, g)
	d.mu.Unlock()
}

// ---- values on the wire ----

// mustMxType panics unless v is of a type an MxValue carries: a test that
// defines an item as an int has a mistake in it.
func mustMxType(addr string, v any) {
	switch v.(type) {
	case bool, int32, int64, float32, float64, string, time.Time:
	default:
		panic(fmt.Sprintf("mxsim: Data item %q: a value of type %T; want bool, int32, int64, float32, float64, string or time.Time", addr, v))
	}
}

// toMxValue puts a value of one of the MxValue types on the wire.
func toMxValue(v any) *mxpb.MxValue {
	switch x := v.(type) {
	case bool:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_BoolValue{BoolValue: x}}
	case int32:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_Int32Value{Int32Value: x}}
	case int64:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_Int64Value{Int64Value: x}}
	case float32:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_FloatValue{FloatValue: x}}
	case float64:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_DoubleValue{DoubleValue: x}}
	case string:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_StringValue{StringValue: x}}
	case time.Time:
		return &mxpb.MxValue{Kind: &mxpb.MxValue_TimeValue{TimeValue: timestamppb.New(x)}}
	}
	return nil
}

// fromMxValue takes a value off the wire; ok is false for an empty one.
func fromMxValue(m *mxpb.MxValue) (v any, ok bool) {
	switch k := m.GetKind().(type) {
	case *mxpb.MxValue_BoolValue:
		return k.BoolValue, true
	case *mxpb.MxValue_Int32Value:
		return k.Int32Value, true
	case *mxpb.MxValue_Int64Value:
		return k.Int64Value, true
	case *mxpb.MxValue_FloatValue:
		return k.FloatValue, true
	case *mxpb.MxValue_DoubleValue:
		return k.DoubleValue, true
	case *mxpb.MxValue_StringValue:
		return k.StringValue, true
	case *mxpb.MxValue_TimeValue:
		return k.TimeValue.AsTime(), true
	}
	return nil, false
}

// sameMxType reports whether a and b are of the same Go type, which is
// what MXAccess checks a write against (no conversions).
func sameMxType(a, b any) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }
