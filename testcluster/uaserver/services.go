package uaserver

import (
	"crypto/rand"
	"math"
	"time"

	"github.com/gopcua/opcua/ua"
)

// Session limits. The server revises the client's session timeout into
// this range.
const (
	minSessionTimeout     = time.Second
	maxSessionTimeout     = time.Hour
	defaultSessionTimeout = time.Minute
	maxSessions           = 256
	maxContinuationPoints = 16
)

func (s *Server) appDescription() *ua.ApplicationDescription {
	return &ua.ApplicationDescription{
		ApplicationURI:  s.uri,
		ProductURI:      "urn:apbridge:testcluster",
		ApplicationName: ua.NewLocalizedText("apbridge testcluster OPC UA server " + s.name),
		ApplicationType: ua.ApplicationTypeServer,
		DiscoveryURLs:   []string{s.endpoint},
	}
}

// endpointDescription is the server's only endpoint: the proxy's address,
// security None, anonymous users.
func (s *Server) endpointDescription() *ua.EndpointDescription {
	return &ua.EndpointDescription{
		EndpointURL:       s.endpoint,
		Server:            s.appDescription(),
		SecurityMode:      ua.MessageSecurityModeNone,
		SecurityPolicyURI: ua.SecurityPolicyURINone,
		UserIdentityTokens: []*ua.UserTokenPolicy{{
			PolicyID:          "anonymous",
			TokenType:         ua.UserTokenTypeAnonymous,
			SecurityPolicyURI: ua.SecurityPolicyURINone,
		}},
		TransportProfileURI: "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary",
	}
}

func (s *Server) getEndpoints(r *ua.GetEndpointsRequest) ua.Response {
	return &ua.GetEndpointsResponse{
		ResponseHeader: respHeader(r, ua.StatusOK),
		Endpoints:      []*ua.EndpointDescription{s.endpointDescription()},
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func (s *Server) createSession(c *uaConn, r *ua.CreateSessionRequest) ua.Response {
	timeout := defaultSessionTimeout
	if t := r.RequestedSessionTimeout; !math.IsNaN(t) && t > 0 {
		timeout = time.Duration(t * float64(time.Millisecond))
		timeout = min(max(timeout, minSessionTimeout), maxSessionTimeout)
	}
	sig, alg, err := c.sc.NewSessionSignature(r.ClientCertificate, r.ClientNonce)
	if err != nil {
		return serviceFault(r, ua.StatusBadSecurityChecksFailed)
	}
	sess, code := s.eng.newSession(c, r.SessionName, timeout, r.ClientCertificate)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	return &ua.CreateSessionResponse{
		ResponseHeader:        respHeader(r, ua.StatusOK),
		SessionID:             sess.id,
		AuthenticationToken:   sess.token,
		RevisedSessionTimeout: float64(timeout / time.Millisecond),
		ServerNonce:           sess.nonce,
		ServerEndpoints:       []*ua.EndpointDescription{s.endpointDescription()},
		ServerSignature:       &ua.SignatureData{Algorithm: alg, Signature: sig},
	}
}

func (s *Server) activateSession(c *uaConn, r *ua.ActivateSessionRequest) ua.Response {
	if tok := r.UserIdentityToken; tok != nil && tok.Value != nil {
		if _, ok := tok.Value.(*ua.AnonymousIdentityToken); !ok {
			return serviceFault(r, ua.StatusBadIdentityTokenRejected)
		}
	}
	var sig []byte
	if r.ClientSignature != nil {
		sig = r.ClientSignature.Signature
	}
	nonce, code := s.eng.activate(c, r.RequestHeader.AuthenticationToken, sig)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	return &ua.ActivateSessionResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		ServerNonce:     nonce,
		Results:         []ua.StatusCode{},
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (s *Server) closeSession(r *ua.CloseSessionRequest) ua.Response {
	if code := s.eng.closeSession(r.RequestHeader.AuthenticationToken, r.DeleteSubscriptions); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	return &ua.CloseSessionResponse{ResponseHeader: respHeader(r, ua.StatusOK)}
}

func (s *Server) cancel(r *ua.CancelRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	// Requests are answered in order and none waits, so there is never
	// anything to cancel.
	return &ua.CancelResponse{ResponseHeader: respHeader(r, ua.StatusOK)}
}

func (s *Server) readService(c *uaConn, r *ua.ReadRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	switch {
	case len(r.NodesToRead) == 0:
		return serviceFault(r, ua.StatusBadNothingToDo)
	case r.MaxAge < 0 || math.IsNaN(r.MaxAge):
		return serviceFault(r, ua.StatusBadMaxAgeInvalid)
	case r.TimestampsToReturn > ua.TimestampsToReturnNeither:
		return serviceFault(r, ua.StatusBadTimestampsToReturnInvalid)
	}
	s.eng.nodesRead.Add(uint64(len(r.NodesToRead)))
	now := time.Now()
	results := make([]*ua.DataValue, len(r.NodesToRead))
	for i, rv := range r.NodesToRead {
		results[i] = s.space.read(rv, r.TimestampsToReturn, now)
	}
	return &ua.ReadResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		Results:         results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (s *Server) writeService(c *uaConn, r *ua.WriteRequest) ua.Response {
	// Counted as it arrives, whatever the answer: a test proves with it
	// that a write the relay refused never reached a server.
	s.eng.nodesWritten.Add(uint64(len(r.NodesToWrite)))
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	switch {
	case len(r.NodesToWrite) == 0:
		return serviceFault(r, ua.StatusBadNothingToDo)
	case c.tooManyOps(len(r.NodesToWrite), 4):
		return serviceFault(r, ua.StatusBadTooManyOperations)
	}
	results := make([]ua.StatusCode, len(r.NodesToWrite))
	for i, wv := range r.NodesToWrite {
		results[i] = s.write(wv)
	}
	return &ua.WriteResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		Results:         results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

// write performs one write. Only the Value of a setpoint is writable, only
// as a Double, and only while the server is Healthy: a standby below 200
// refuses writes with Bad_OutOfService, as a warm standby gates writes to a
// shared device. gopcua's server panicked on a write to an unknown
// namespace; here that is Bad_NodeIdUnknown.
func (s *Server) write(wv *ua.WriteValue) ua.StatusCode {
	if wv == nil || wv.NodeID == nil {
		return ua.StatusBadNodeIDInvalid
	}
	n := s.space.node(wv.NodeID)
	switch {
	case n == nil:
		return ua.StatusBadNodeIDUnknown
	case wv.AttributeID != ua.AttributeIDValue:
		if _, code := n.attribute(wv.AttributeID); code != ua.StatusOK {
			return ua.StatusBadAttributeIDInvalid
		}
		return ua.StatusBadNotWritable
	case n.setpoint < 0:
		return ua.StatusBadNotWritable
	case wv.IndexRange != "":
		return ua.StatusBadWriteNotSupported
	case wv.Value == nil || wv.Value.Value == nil:
		return ua.StatusBadTypeMismatch
	case wv.Value.EncodingMask&ua.DataValueStatusCode != 0 && wv.Value.Status != ua.StatusOK:
		return ua.StatusBadWriteNotSupported
	case s.Level() < healthyLevel:
		return ua.StatusBadOutOfService
	}
	v, ok := wv.Value.Value.Value().(float64)
	if !ok {
		return ua.StatusBadTypeMismatch
	}
	src := wv.Value.SourceTimestamp
	if wv.Value.EncodingMask&ua.DataValueSourceTimestamp == 0 {
		src = time.Time{}
	}
	s.pair.writeSetpoint(s, n.setpoint, v, src)
	return ua.StatusOK
}

func (s *Server) browseService(c *uaConn, r *ua.BrowseRequest) ua.Response {
	sess, code := s.eng.session(r.RequestHeader)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.NodesToBrowse) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	if r.View != nil && r.View.ViewID != nil && !(r.View.ViewID.Namespace() == 0 && r.View.ViewID.IntID() == 0) {
		return serviceFault(r, ua.StatusBadViewIDUnknown)
	}
	results := make([]*ua.BrowseResult, len(r.NodesToBrowse))
	for i, bd := range r.NodesToBrowse {
		refs, code := s.space.browse(bd)
		if code != ua.StatusOK {
			results[i] = &ua.BrowseResult{StatusCode: code, References: []*ua.ReferenceDescription{}}
			continue
		}
		results[i] = s.eng.paginate(sess, refs, r.RequestedMaxReferencesPerNode)
	}
	return &ua.BrowseResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		Results:         results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (s *Server) browseNext(c *uaConn, r *ua.BrowseNextRequest) ua.Response {
	sess, code := s.eng.session(r.RequestHeader)
	if code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.ContinuationPoints) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	results := make([]*ua.BrowseResult, len(r.ContinuationPoints))
	for i, cp := range r.ContinuationPoints {
		results[i] = s.eng.resume(sess, cp, r.ReleaseContinuationPoints)
	}
	return &ua.BrowseNextResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		Results:         results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (s *Server) translateService(c *uaConn, r *ua.TranslateBrowsePathsToNodeIDsRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.BrowsePaths) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	results := make([]*ua.BrowsePathResult, len(r.BrowsePaths))
	for i, bp := range r.BrowsePaths {
		results[i] = s.space.translate(bp)
	}
	return &ua.TranslateBrowsePathsToNodeIDsResponse{
		ResponseHeader:  respHeader(r, ua.StatusOK),
		Results:         results,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
}

func (s *Server) registerNodes(r *ua.RegisterNodesRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.NodesToRegister) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	// Registering is a hint for faster access; every node is already as
	// fast as it gets, so the registered id is the node id.
	return &ua.RegisterNodesResponse{ResponseHeader: respHeader(r, ua.StatusOK), RegisteredNodeIDs: r.NodesToRegister}
}

func (s *Server) unregisterNodes(r *ua.UnregisterNodesRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.NodesToUnregister) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	return &ua.UnregisterNodesResponse{ResponseHeader: respHeader(r, ua.StatusOK)}
}

// callService answers method calls: the address space has no methods.
func (s *Server) callService(c *uaConn, r *ua.CallRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.MethodsToCall) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	results := make([]*ua.CallMethodResult, len(r.MethodsToCall))
	for i, m := range r.MethodsToCall {
		code := ua.StatusBadMethodInvalid
		if m == nil || s.space.node(m.ObjectID) == nil {
			code = ua.StatusBadNodeIDUnknown
		}
		results[i] = &ua.CallMethodResult{
			StatusCode:                   code,
			InputArgumentResults:         []ua.StatusCode{},
			InputArgumentDiagnosticInfos: []*ua.DiagnosticInfo{},
			OutputArguments:              []*ua.Variant{},
		}
	}
	return &ua.CallResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}

// historyRead answers that no node keeps history.
func (s *Server) historyRead(c *uaConn, r *ua.HistoryReadRequest) ua.Response {
	if _, code := s.eng.session(r.RequestHeader); code != ua.StatusOK {
		return serviceFault(r, code)
	}
	if len(r.NodesToRead) == 0 {
		return serviceFault(r, ua.StatusBadNothingToDo)
	}
	results := make([]*ua.HistoryReadResult, len(r.NodesToRead))
	for i := range results {
		results[i] = &ua.HistoryReadResult{StatusCode: ua.StatusBadHistoryOperationUnsupported, HistoryData: ua.NewExtensionObject(nil)}
	}
	return &ua.HistoryReadResponse{ResponseHeader: respHeader(r, ua.StatusOK), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}
}
