package bridge

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
	"github.com/rs/zerolog"
)

// OPCUASource is a Source on a redundant OPC UA server pair: a
// servicelevel.Pair follows the servers' ServiceLevel, keeps a warm
// standby session and fails over; the source turns its data changes into
// updates and its promotions into refresh frames.
type OPCUASource struct {
	name string
	cfg  servicelevel.PairConfig
	opts []servicelevel.PairOption
	log  zerolog.Logger

	mu     sync.Mutex
	pair   *servicelevel.Pair
	h      Handler
	added  map[uint32]bool
	health Health
	closed bool
}

// NewOPCUASource checks cfg and returns a source named name. opts are
// passed to the Pair (client options for security, a logger).
func NewOPCUASource(name string, cfg servicelevel.PairConfig, log zerolog.Logger, opts ...servicelevel.PairOption) (*OPCUASource, error) {
	if name == "" {
		return nil, errors.New("bridge: OPC UA source: name is empty")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: OPC UA source %q: %w", name, err)
	}
	return &OPCUASource{
		name: name, cfg: cfg, opts: opts, log: log,
		added:  map[uint32]bool{},
		health: Health{State: StateConnecting, Level: -1},
	}, nil
}

// Name implements Source.
func (s *OPCUASource) Name() string { return s.name }

// Start implements Source: it starts the Pair, which connects in the
// background.
func (s *OPCUASource) Start(ctx context.Context, h Handler) error {
	opts := append([]servicelevel.PairOption{
		servicelevel.WithPairName(s.name),
		servicelevel.WithLogger(s.log),
		servicelevel.WithDataHandler(s.onData),
		servicelevel.WithEventHandler(s.onEvent),
	}, s.opts...)
	p, err := servicelevel.NewPair(s.cfg, opts...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pair, s.h = p, h
	s.mu.Unlock()
	if err := p.Start(ctx); err != nil {
		p.Close()
		return err
	}
	return nil
}

// onData runs on the Pair's output goroutine, in order.
func (s *OPCUASource) onData(u servicelevel.Update) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		return
	}
	switch u.Kind {
	case servicelevel.UpdateData, servicelevel.UpdateRefreshValue:
		h.Update(u.Handle, fromDataValue(u.Value))
	case servicelevel.UpdateRefreshStart:
		h.RefreshStart(fmt.Sprintf("%s on %s", u.Cause, u.Endpoint))
	case servicelevel.UpdateRefreshEnd:
		h.RefreshEnd()
	}
}

func (s *OPCUASource) onEvent(e servicelevel.Event) {
	s.mu.Lock()
	p, h := s.pair, s.h
	s.mu.Unlock()
	if p == nil || h == nil {
		return
	}
	hl := s.healthOf(p.Status())
	if e.Kind == servicelevel.EventFailover {
		hl.LastSwitch, hl.LastAt = e.String(), e.At
	} else {
		s.mu.Lock()
		hl.LastSwitch, hl.LastAt = s.health.LastSwitch, s.health.LastAt
		s.mu.Unlock()
	}
	s.mu.Lock()
	changed := hl != s.health
	s.health = hl
	s.mu.Unlock()
	if changed {
		h.HealthChanged(hl)
	}
}

func (s *OPCUASource) healthOf(st servicelevel.PairStatus) Health {
	h := Health{Endpoint: st.ActiveURL, Level: -1}
	if v, ok := st.ActiveLevel.Value(); ok {
		h.Level = int(v)
	}
	switch {
	case !st.Connected && st.Switching:
		h.State = StateConnecting
	case !st.Connected:
		h.State = StateDown
	case !st.ActiveLevel.Healthy():
		h.State = StateDegraded
		h.Detail = "the active server reports " + st.ActiveLevel.String()
	default:
		h.State = StateConnected
		h.Writable = true
	}
	return h
}

// Subscribe implements Source: the tags become data items of the Pair,
// keyed by their handle, and survive its failovers.
func (s *OPCUASource) Subscribe(ctx context.Context, tags []Tag) ([]error, error) {
	s.mu.Lock()
	p := s.pair
	errs := make([]error, len(tags))
	var items []servicelevel.Item
	var idx []int
	for i, t := range tags {
		if s.added[t.Handle] {
			continue // already a data item: accepted again
		}
		items = append(items, servicelevel.Item{Handle: t.Handle, NodeID: t.Address})
		idx = append(idx, i)
	}
	s.mu.Unlock()
	if p == nil {
		return nil, errors.New("source not started")
	}
	if len(items) == 0 {
		return errs, nil
	}
	res, err := p.AddItems(ctx, items)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range res {
		if k >= len(idx) {
			break
		}
		i := idx[k]
		if r.Err != nil {
			errs[i] = fmt.Errorf("tag %q (%s): %w", tags[i].Name, tags[i].Address, r.Err)
			continue
		}
		s.added[tags[i].Handle] = true
	}
	return errs, nil
}

// Unsubscribe implements Source.
func (s *OPCUASource) Unsubscribe(ctx context.Context, tags []Tag) error {
	s.mu.Lock()
	p := s.pair
	var handles []uint32
	for _, t := range tags {
		if s.added[t.Handle] {
			handles = append(handles, t.Handle)
			delete(s.added, t.Handle)
		}
	}
	s.mu.Unlock()
	if p == nil || len(handles) == 0 {
		return nil
	}
	return p.RemoveItems(ctx, handles)
}

// Write implements Source: the Pair writes on the active endpoint only
// while it reports a Healthy ServiceLevel, never on a standby.
func (s *OPCUASource) Write(ctx context.Context, tag Tag, v any) (StatusCode, error) {
	s.mu.Lock()
	p := s.pair
	s.mu.Unlock()
	if p == nil {
		return 0, ErrNotWritableNow
	}
	code, err := p.WriteNode(ctx, tag.Address, toWriteValue(v))
	if err != nil {
		if errors.Is(err, servicelevel.ErrWriteRefused) {
			return StatusCode(code), fmt.Errorf("%w: %v", ErrNotWritableNow, err)
		}
		return StatusCode(code), err
	}
	return StatusCode(code), nil
}

// toWriteValue gives gopcua a value it encodes as the matching built-in
// type: the bridge's types are already gopcua's, except that a DateTime
// must be UTC.
func toWriteValue(v any) any {
	if t, ok := v.(time.Time); ok {
		return t.UTC()
	}
	return v
}

// Health implements Source.
func (s *OPCUASource) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// Pair returns the source's Pair, once started.
func (s *OPCUASource) Pair() *servicelevel.Pair {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pair
}

// Close implements Source.
func (s *OPCUASource) Close() error {
	s.mu.Lock()
	p := s.pair
	s.closed = true
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
	return nil
}

// fromDataValue turns an OPC UA DataValue into an Update. A value of a type
// the bridge cannot carry becomes a Bad update that says so.
func fromDataValue(dv *ua.DataValue) Update {
	if dv == nil {
		return Update{Status: StatusBadWaitingForInit}
	}
	u := Update{
		Status:     StatusCode(dv.Status),
		SourceTime: dv.SourceTimestamp,
		ServerTime: dv.ServerTimestamp,
	}
	if dv.EncodingMask&ua.DataValueStatusCode == 0 {
		u.Status = StatusGood
	}
	if dv.Value == nil {
		return u
	}
	v := dv.Value.Value()
	switch x := v.(type) {
	case *ua.LocalizedText:
		// A display text: its text is the value a consumer wants.
		if x == nil {
			v = ""
		} else {
			v = x.Text
		}
	}
	if _, ok := TypeOf(v); !ok {
		return Unsupported("", v, u.SourceTime, u.ServerTime)
	}
	u.Value = v
	return u
}

// OPCUASecurity is how an OPC UA source authenticates to its servers.
type OPCUASecurity struct {
	// Policy is the security policy: None (default), Basic256Sha256,
	// Aes128_Sha256_RsaOaep or Aes256_Sha256_RsaPss.
	Policy string `yaml:"policy,omitempty" json:"policy,omitempty"`
	// Mode is None (default), Sign or SignAndEncrypt.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// CertFile and KeyFile are the client's certificate and RSA key (PEM
	// when the name ends in .pem, DER otherwise). Required with a policy
	// other than None; created, self-signed for ApplicationURI, on first
	// run if absent.
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// ApplicationURI is the client's ApplicationUri, written into a
	// created certificate. Default urn:apbridge:<hostname>.
	ApplicationURI string `yaml:"applicationUri,omitempty" json:"applicationUri,omitempty"`
	// ServerCerts are the servers' certificates, one per endpoint in the
	// order of the endpoints: the servers the client trusts.
	ServerCerts []string `yaml:"serverCerts,omitempty" json:"serverCerts,omitempty"`
	// Username and Password select user-name authentication; anonymous
	// without them. Password may be given through the environment (see
	// the configuration reference) and never appears in logs.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"-"`
}

var (
	validPolicies = []string{"None", "Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss"}
	validModes    = []string{"None", "Sign", "SignAndEncrypt"}
)

// Validate checks the fields; field is the path to report, e.g.
// "sources[0].security".
func (c OPCUASecurity) Validate(field string, endpoints int) error {
	var errs []error
	if c.Policy != "" && !contains(validPolicies, c.Policy) {
		errs = append(errs, fmt.Errorf("%s.policy: %q is not valid (valid: %v)", field, c.Policy, validPolicies))
	}
	if c.Mode != "" && !contains(validModes, c.Mode) {
		errs = append(errs, fmt.Errorf("%s.mode: %q is not valid (valid: %v)", field, c.Mode, validModes))
	}
	secure := c.Policy != "" && c.Policy != "None"
	if secure != (c.Mode != "" && c.Mode != "None") {
		errs = append(errs, fmt.Errorf("%s: policy %q and mode %q must both be None or both be set", field, c.Policy, c.Mode))
	}
	if secure && (c.CertFile == "" || c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s: certFile and keyFile are required with policy %s", field, c.Policy))
	}
	if len(c.ServerCerts) > 0 && len(c.ServerCerts) != endpoints {
		errs = append(errs, fmt.Errorf("%s.serverCerts: %d given, want one per endpoint (%d)", field, len(c.ServerCerts), endpoints))
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, fmt.Errorf("%s: username and password go together", field))
	}
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ClientOptions returns the gopcua client options that apply c to the
// endpoint with the given index (0 primary, 1 backup): security policy and
// mode, the client certificate (created if absent), that server's
// certificate and the user.
func (c OPCUASecurity) ClientOptions(endpoint int) ([]opcua.Option, error) {
	opts, err := c.commonOptions()
	if err != nil {
		return nil, err
	}
	if endpoint < len(c.ServerCerts) {
		opts = append(opts, opcua.RemoteCertificateFile(c.ServerCerts[endpoint]))
	}
	return opts, nil
}

func (c OPCUASecurity) commonOptions() ([]opcua.Option, error) {
	policy, mode := c.Policy, c.Mode
	if policy == "" {
		policy = "None"
	}
	if mode == "" {
		mode = "None"
	}
	opts := []opcua.Option{opcua.SecurityPolicy(policy), opcua.SecurityModeString(mode)}
	if policy != "None" {
		if _, err := EnsureClientCertificate(c.CertFile, c.KeyFile, c.applicationURI()); err != nil {
			return nil, err
		}
		opts = append(opts, opcua.CertificateFile(c.CertFile), opcua.PrivateKeyFile(c.KeyFile))
	}
	if c.Username != "" {
		opts = append(opts, opcua.AuthUsername(c.Username, c.Password))
	} else {
		opts = append(opts, opcua.AuthAnonymous())
	}
	return opts, nil
}

// PairOptions returns the Pair options that apply c to both endpoints.
func (c OPCUASecurity) PairOptions() ([]servicelevel.PairOption, error) {
	common, err := c.commonOptions()
	if err != nil {
		return nil, err
	}
	opts := []servicelevel.PairOption{servicelevel.WithClientOptions(common...)}
	for i, f := range c.ServerCerts {
		e := servicelevel.Primary
		if i == 1 {
			e = servicelevel.Backup
		}
		opts = append(opts, servicelevel.WithEndpointClientOptions(e, opcua.RemoteCertificateFile(f)))
	}
	return opts, nil
}

// ValidateNodeID checks that s is an OPC UA node ID in its string form
// (ns=2;s=Line1.Temp, i=2258, ns=3;g=..., ns=1;b=...).
func ValidateNodeID(s string) error {
	if s == "" {
		return errors.New("empty node ID")
	}
	// gopcua reads anything without a type prefix as a string identifier;
	// a config that says "Line1.Temp" more likely forgot "ns=2;s=".
	if !nodeIDForm.MatchString(s) {
		return errors.New("want the string form [ns=<index>;]<i|s|g|b>=<identifier>, e.g. ns=2;s=Line1.Temp")
	}
	_, err := ua.ParseNodeID(s)
	return err
}

var nodeIDForm = regexp.MustCompile(`^(ns=\d+;|nsu=[^;]+;)?(i=\d+|s=.+|g=[0-9A-Fa-f-]{36}|b=.+)$`)
