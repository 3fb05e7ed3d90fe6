package mxsim

import (
	"fmt"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The commands a session's worker runs. Each runs on the worker alone, so
// the session's state needs its lock only against the readers beside it
// (data changes, Stats).
//
// Lock order: the data's lock, then the session's. A command that reads
// or writes the data takes no session lock meanwhile, except through
// Data.locked, where the order is kept.

// mxKind names a command for the stats and the OnCommand hook; "" for an
// empty one.
func mxKind(cmd *mxpb.MxCommand) string {
	switch cmd.GetCommand().(type) {
	case *mxpb.MxCommand_Register:
		return "Register"
	case *mxpb.MxCommand_AddItemBulk:
		return "AddItemBulk"
	case *mxpb.MxCommand_Advise:
		return "Advise"
	case *mxpb.MxCommand_UnAdvise:
		return "UnAdvise"
	case *mxpb.MxCommand_RemoveItem:
		return "RemoveItem"
	case *mxpb.MxCommand_Write:
		return "Write"
	case *mxpb.MxCommand_Read:
		return "Read"
	case *mxpb.MxCommand_Ping:
		return "Ping"
	case *mxpb.MxCommand_AdviseSupervisory:
		return "AdviseSupervisory"
	case *mxpb.MxCommand_AdviseItemBulk:
		return "AdviseItemBulk"
	case *mxpb.MxCommand_SubscribeBulk:
		return "SubscribeBulk"
	}
	return ""
}

func mxOK() *mxpb.MxStatus { return &mxpb.MxStatus{Code: mxpb.MxStatusCode_MX_STATUS_CODE_OK} }

func mxErr(code mxpb.MxStatusCode, format string, args ...any) *mxpb.MxStatus {
	return &mxpb.MxStatus{Code: code, Message: fmt.Sprintf(format, args...)}
}

// execute runs c and returns its reply. The command's status is its own
// outcome; what happened to each item of a bulk command, and to a write,
// is in the reply's body.
func (s *mxSession) execute(c *mxCall) *mxpb.MxCommandReply {
	rep := &mxpb.MxCommandReply{ClientCorrelationId: c.corr, Status: mxOK()}
	switch cmd := c.cmd.GetCommand().(type) {
	case *mxpb.MxCommand_Register:
		rep.Reply = &mxpb.MxCommandReply_Register{Register: &mxpb.RegisterReply{ServerHandle: s.register()}}
	case *mxpb.MxCommand_AddItemBulk:
		s.g.stats.items("AddItemBulk", len(cmd.AddItemBulk.GetTagAddresses()))
		rep.Status, rep.Reply = s.addItems(cmd.AddItemBulk.GetServerHandle(), cmd.AddItemBulk.GetTagAddresses(), mxNotAdvised)
	case *mxpb.MxCommand_SubscribeBulk:
		sb := cmd.SubscribeBulk
		s.g.stats.items("SubscribeBulk", len(sb.GetTagAddresses()))
		kind := mxAdvisedPlain
		if sb.GetSupervisory() {
			if s.bulkSup {
				kind = mxAdvisedSupervisory
			} else {
				// What a gateway without the capability does: it does not
				// know the field. The client's writes will be refused.
				s.g.log.Debug().Str("session", s.id).Msg("mxsim: SubscribeBulk supervisory ignored: capability not advertised")
			}
		}
		rep.Status, rep.Reply = s.addItems(sb.GetServerHandle(), sb.GetTagAddresses(), kind)
		if kind == mxAdvisedSupervisory && rep.Status.GetCode() == mxpb.MxStatusCode_MX_STATUS_CODE_OK {
			s.g.stats.supervisoryBulk()
		}
	case *mxpb.MxCommand_Advise:
		rep.Status = s.advise(cmd.Advise.GetServerHandle(), cmd.Advise.GetItemHandle(), mxAdvisedPlain)
	case *mxpb.MxCommand_AdviseSupervisory:
		rep.Status = s.advise(cmd.AdviseSupervisory.GetServerHandle(), cmd.AdviseSupervisory.GetItemHandle(), mxAdvisedSupervisory)
	case *mxpb.MxCommand_AdviseItemBulk:
		s.g.stats.items("AdviseItemBulk", len(cmd.AdviseItemBulk.GetItemHandles()))
		rep.Status, rep.Reply = s.adviseBulk(cmd.AdviseItemBulk.GetServerHandle(), cmd.AdviseItemBulk.GetItemHandles())
	case *mxpb.MxCommand_UnAdvise:
		rep.Status = s.withItem(cmd.UnAdvise.GetServerHandle(), cmd.UnAdvise.GetItemHandle(), func(it *mxItem) {
			it.advise = mxNotAdvised
		})
	case *mxpb.MxCommand_RemoveItem:
		rep.Status = s.withItem(cmd.RemoveItem.GetServerHandle(), cmd.RemoveItem.GetItemHandle(), func(it *mxItem) {
			delete(s.items, it.handle)
			delete(s.byAddr, it.addr)
		})
	case *mxpb.MxCommand_Write:
		st := s.write(cmd.Write)
		if st.GetCode() == mxpb.MxStatusCode_MX_STATUS_CODE_NOT_REGISTERED {
			rep.Status = st
		}
		rep.Reply = &mxpb.MxCommandReply_Write{Write: &mxpb.WriteReply{Status: st}}
	case *mxpb.MxCommand_Read:
		var vals []*mxpb.ItemValue
		rep.Status, vals = s.read(cmd.Read.GetServerHandle(), cmd.Read.GetItemHandles())
		rep.Reply = &mxpb.MxCommandReply_Read{Read: &mxpb.ReadReply{Values: vals}}
	case *mxpb.MxCommand_Ping:
		// Nothing: the round trip is the point.
	}
	return rep
}

// register returns the session's server handle, making one the first
// time. Handles are unique on the gateway, so that a handle of another
// session is NOT_REGISTERED here.
func (s *mxSession) register() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server == 0 {
		s.server = s.g.nextServer.Add(1)
	}
	return s.server
}

// serverLocked checks a command's server handle. s.mu is held.
func (s *mxSession) serverLocked(h int32) *mxpb.MxStatus {
	if s.server == 0 || h != s.server {
		return mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_NOT_REGISTERED, "server handle %d is not registered on session %s", h, s.id)
	}
	return nil
}

// withItem runs f on an added item, with s.mu held.
func (s *mxSession) withItem(server, item int32, f func(it *mxItem)) *mxpb.MxStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.serverLocked(server); st != nil {
		return st
	}
	it := s.items[item]
	if it == nil {
		return mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_INVALID_HANDLE, "no item handle %d", item)
	}
	f(it)
	return mxOK()
}

// adviseLocked advises it as kind and queues its current value, the first
// OnDataChange of an advise. The data's lock and s.mu are held, so no
// change of the item falls between that value and the next.
func (s *mxSession) adviseLocked(it *mxItem, kind mxAdvise, current func(string) *mxSample) {
	it.advise = kind
	if smp := current(it.addr); smp != nil {
		s.dataEventLocked(it, smp)
	}
}

// addItems adds every address (the same handle again for one added
// before) and, unless advise is mxNotAdvised, advises it so: AddItemBulk
// and SubscribeBulk, in one pass.
func (s *mxSession) addItems(server int32, addrs []string, advise mxAdvise) (*mxpb.MxStatus, *mxpb.MxCommandReply_Items) {
	results := make([]*mxpb.ItemResult, len(addrs))
	var st *mxpb.MxStatus
	s.g.data.locked(func(current func(string) *mxSample) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if st = s.serverLocked(server); st != nil {
			return
		}
		for i, a := range addrs {
			if current(a) == nil {
				results[i] = &mxpb.ItemResult{TagAddress: a, Status: mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_UNKNOWN_ITEM, "unknown item %q", a)}
				continue
			}
			it := s.byAddr[a]
			if it == nil {
				s.nextItem++
				it = &mxItem{handle: s.nextItem, addr: a}
				s.items[it.handle], s.byAddr[a] = it, it
			}
			if advise != mxNotAdvised {
				s.adviseLocked(it, advise, current)
			}
			results[i] = &mxpb.ItemResult{TagAddress: a, ItemHandle: it.handle, Status: mxOK()}
		}
	})
	if st != nil {
		return st, nil
	}
	return mxOK(), &mxpb.MxCommandReply_Items{Items: &mxpb.BulkItemReply{Results: results}}
}

// advise advises one added item as kind.
func (s *mxSession) advise(server, item int32, kind mxAdvise) *mxpb.MxStatus {
	var st *mxpb.MxStatus
	s.g.data.locked(func(current func(string) *mxSample) {
		st = s.withItem(server, item, func(it *mxItem) { s.adviseLocked(it, kind, current) })
	})
	return st
}

// adviseBulk advises added items plainly: AdviseItemBulk.
func (s *mxSession) adviseBulk(server int32, handles []int32) (*mxpb.MxStatus, *mxpb.MxCommandReply_Items) {
	results := make([]*mxpb.ItemResult, len(handles))
	var st *mxpb.MxStatus
	s.g.data.locked(func(current func(string) *mxSample) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if st = s.serverLocked(server); st != nil {
			return
		}
		for i, h := range handles {
			it := s.items[h]
			if it == nil {
				results[i] = &mxpb.ItemResult{ItemHandle: h, Status: mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_INVALID_HANDLE, "no item handle %d", h)}
				continue
			}
			s.adviseLocked(it, mxAdvisedPlain, current)
			results[i] = &mxpb.ItemResult{TagAddress: it.addr, ItemHandle: h, Status: mxOK()}
		}
	})
	if st != nil {
		return st, nil
	}
	return mxOK(), &mxpb.MxCommandReply_Items{Items: &mxpb.BulkItemReply{Results: results}}
}

// write applies the gateway's write rules, then sets the value with good
// quality. A supervisory session (write user 0) writes as user 0 and only
// to items advised supervisory: on MXAccess a plain advise on such a
// connection makes writes vanish, which the simulator turns into a
// visible WRITE_REFUSED. A session with a write user writes as that user.
func (s *mxSession) write(w *mxpb.WriteCommand) *mxpb.MxStatus {
	var addr string
	var kind mxAdvise
	st := s.withItem(w.GetServerHandle(), w.GetItemHandle(), func(it *mxItem) { addr, kind = it.addr, it.advise })
	if st.GetCode() != mxpb.MxStatusCode_MX_STATUS_CODE_OK {
		return st
	}
	refused := func(format string, args ...any) *mxpb.MxStatus {
		return mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_WRITE_REFUSED, format, args...)
	}
	switch {
	case kind == mxNotAdvised:
		return refused("item %q is not advised", addr)
	case s.writeUser == 0 && w.GetUserId() != 0:
		return refused("item %q: a supervisory session writes as user 0, not %d", addr, w.GetUserId())
	case s.writeUser == 0 && kind != mxAdvisedSupervisory:
		return refused("item %q is advised plainly on a supervisory session: it needs a supervisory advise", addr)
	case s.writeUser != 0 && w.GetUserId() != s.writeUser:
		return refused("item %q: the session writes as user %d, not %d", addr, s.writeUser, w.GetUserId())
	}
	v, ok := fromMxValue(w.GetValue())
	cur, _, _, _ := s.g.data.Get(addr)
	if !ok || !sameMxType(v, cur) {
		return mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_WRONG_TYPE, "item %q holds a %T, the write a %T", addr, cur, v)
	}
	s.g.data.Set(addr, v, QualityGood)
	return mxOK()
}

// read returns the current values of added items; an unknown handle fails
// the whole read.
func (s *mxSession) read(server int32, handles []int32) (*mxpb.MxStatus, []*mxpb.ItemValue) {
	addrs := make([]string, len(handles))
	s.mu.Lock()
	st := s.serverLocked(server)
	for i, h := range handles {
		if st != nil {
			break
		}
		if it := s.items[h]; it != nil {
			addrs[i] = it.addr
		} else {
			st = mxErr(mxpb.MxStatusCode_MX_STATUS_CODE_INVALID_HANDLE, "no item handle %d", h)
		}
	}
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	vals := make([]*mxpb.ItemValue, len(handles))
	for i, h := range handles {
		v, q, at, _ := s.g.data.Get(addrs[i])
		vals[i] = &mxpb.ItemValue{ItemHandle: h, Value: toMxValue(v), Quality: q, Timestamp: timestamppb.New(at)}
	}
	return mxOK(), vals
}
