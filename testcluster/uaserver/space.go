package uaserver

import (
	"fmt"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// uaNode is one node of a server's address space. The address space is
// built before the server accepts connections and never changes after, so
// nodes are read without locks; variable values come from value functions
// that read atomics.
type uaNode struct {
	id        *ua.NodeID
	class     ua.NodeClass
	browse    *ua.QualifiedName
	display   *ua.LocalizedText
	desc      *ua.LocalizedText
	typeDef   *ua.NodeID // objects and variables
	dataType  *ua.NodeID // variables
	valueRank int32      // variables: -1 scalar, 1 array
	access    byte       // variables: AccessLevel and UserAccessLevel
	minSample float64    // variables: MinimumSamplingInterval in ms
	abstract  bool       // types
	inverse   string     // reference types: InverseName
	refs      []uaRef

	// value returns a new DataValue on each call (callers adjust its
	// timestamps), or is nil for nodes that are not variables.
	value func() *ua.DataValue
	// setpoint is the index of the setpoint this node serves, or -1.
	setpoint int
}

// uaRef is a reference from the node that holds it.
type uaRef struct {
	typ     uint32 // a reference type in namespace 0
	forward bool
	target  *uaNode
}

// uaSpace is an address space: the part of namespace 0 that clients of
// apbridge use (the Server object with ServiceLevel, ServerArray,
// ServerStatus and ServerRedundancy, the standard folders, the types they
// reference) and the simulated tags in namespace 1.
type uaSpace struct {
	nodes map[string]*uaNode
}

func newUASpace() *uaSpace { return &uaSpace{nodes: make(map[string]*uaNode)} }

// node returns the node with the given id, or nil.
func (a *uaSpace) node(nid *ua.NodeID) *uaNode {
	if nid == nil {
		return nil
	}
	return a.nodes[nid.String()]
}

func (a *uaSpace) add(n *uaNode) *uaNode {
	if n.display == nil {
		n.display = ua.NewLocalizedText(n.browse.Name)
	}
	if n.desc == nil {
		n.desc = ua.NewLocalizedText("")
	}
	if n.setpoint == 0 {
		n.setpoint = -1
	}
	a.nodes[n.id.String()] = n
	return n
}

// link adds a reference of type typ from parent to child and the inverse
// reference back.
func link(parent *uaNode, typ uint32, child *uaNode) {
	parent.refs = append(parent.refs, uaRef{typ: typ, forward: true, target: child})
	child.refs = append(child.refs, uaRef{typ: typ, forward: false, target: parent})
}

// refTypeParent is the reference type hierarchy of the types this server
// uses: each type's supertype. Browse needs it for IncludeSubtypes.
var refTypeParent = map[uint32]uint32{
	id.NonHierarchicalReferences: id.References,
	id.HierarchicalReferences:    id.References,
	id.HasChild:                  id.HierarchicalReferences,
	id.Organizes:                 id.HierarchicalReferences,
	id.Aggregates:                id.HasChild,
	id.HasSubtype:                id.HasChild,
	id.HasProperty:               id.Aggregates,
	id.HasComponent:              id.Aggregates,
	id.HasTypeDefinition:         id.NonHierarchicalReferences,
}

// isRefSubtype reports whether reference type t is want or a subtype of it.
func isRefSubtype(t, want uint32) bool {
	for {
		if t == want {
			return true
		}
		p, ok := refTypeParent[t]
		if !ok {
			return false
		}
		t = p
	}
}

func knownRefType(t uint32) bool {
	_, ok := refTypeParent[t]
	return ok || t == id.References
}

func qn(ns uint16, name string) *ua.QualifiedName {
	return &ua.QualifiedName{NamespaceIndex: ns, Name: name}
}

func ns0(i uint32) *ua.NodeID { return ua.NewNumericNodeID(0, i) }

// attribute returns a non-Value attribute of the node.
func (n *uaNode) attribute(attr ua.AttributeID) (*ua.Variant, ua.StatusCode) {
	isVar := n.class == ua.NodeClassVariable
	var v any
	switch attr {
	case ua.AttributeIDNodeID:
		v = n.id
	case ua.AttributeIDNodeClass:
		v = int32(n.class)
	case ua.AttributeIDBrowseName:
		v = n.browse
	case ua.AttributeIDDisplayName:
		v = n.display
	case ua.AttributeIDDescription:
		v = n.desc
	case ua.AttributeIDWriteMask, ua.AttributeIDUserWriteMask:
		v = uint32(0)
	case ua.AttributeIDIsAbstract:
		switch n.class {
		case ua.NodeClassObjectType, ua.NodeClassVariableType, ua.NodeClassReferenceType, ua.NodeClassDataType:
			v = n.abstract
		}
	case ua.AttributeIDSymmetric:
		if n.class == ua.NodeClassReferenceType {
			v = false
		}
	case ua.AttributeIDInverseName:
		if n.class == ua.NodeClassReferenceType {
			v = ua.NewLocalizedText(n.inverse)
		}
	case ua.AttributeIDEventNotifier:
		if n.class == ua.NodeClassObject {
			v = byte(0)
		}
	case ua.AttributeIDDataType:
		if isVar {
			v = n.dataType
		}
	case ua.AttributeIDValueRank:
		if isVar {
			v = n.valueRank
		}
	case ua.AttributeIDArrayDimensions:
		if isVar {
			if n.valueRank == 1 {
				v = []uint32{0}
			} else {
				v = []uint32{}
			}
		}
	case ua.AttributeIDAccessLevel, ua.AttributeIDUserAccessLevel:
		if isVar {
			v = n.access
		}
	case ua.AttributeIDMinimumSamplingInterval:
		if isVar {
			v = n.minSample
		}
	case ua.AttributeIDHistorizing:
		if isVar {
			v = false
		}
	}
	if v == nil {
		return nil, ua.StatusBadAttributeIDInvalid
	}
	vv, err := ua.NewVariant(v)
	if err != nil {
		return nil, ua.StatusBadInternalError
	}
	return vv, ua.StatusGood
}

// statusValue is a DataValue carrying only a status code.
func statusValue(code ua.StatusCode) *ua.DataValue {
	return &ua.DataValue{EncodingMask: ua.DataValueStatusCode, Status: code}
}

// read reads one attribute. The result is the caller's to keep.
func (a *uaSpace) read(rv *ua.ReadValueID, ts ua.TimestampsToReturn, now time.Time) *ua.DataValue {
	if rv == nil || rv.NodeID == nil {
		return statusValue(ua.StatusBadNodeIDInvalid)
	}
	n := a.node(rv.NodeID)
	if n == nil {
		return statusValue(ua.StatusBadNodeIDUnknown)
	}
	if rv.IndexRange != "" {
		return statusValue(ua.StatusBadIndexRangeInvalid)
	}
	if rv.DataEncoding != nil && rv.DataEncoding.Name != "" && rv.DataEncoding.Name != "Default Binary" {
		return statusValue(ua.StatusBadDataEncodingUnsupported)
	}
	return n.read(rv.AttributeID, ts, now)
}

// read reads one attribute of n with the requested timestamps.
func (n *uaNode) read(attr ua.AttributeID, ts ua.TimestampsToReturn, now time.Time) *ua.DataValue {
	if attr == ua.AttributeIDValue {
		if n.value == nil {
			return statusValue(ua.StatusBadAttributeIDInvalid)
		}
		return withTimestamps(n.value(), ts, now)
	}
	v, code := n.attribute(attr)
	if code != ua.StatusGood {
		return statusValue(code)
	}
	return &ua.DataValue{EncodingMask: ua.DataValueValue, Value: v}
}

// withTimestamps keeps the timestamps the client asked for. It modifies dv,
// which must be the caller's own.
func withTimestamps(dv *ua.DataValue, ts ua.TimestampsToReturn, now time.Time) *ua.DataValue {
	switch ts {
	case ua.TimestampsToReturnSource:
		dv.ServerTimestamp = time.Time{}
	case ua.TimestampsToReturnServer:
		dv.SourceTimestamp = time.Time{}
		if dv.ServerTimestamp.IsZero() {
			dv.ServerTimestamp = now
		}
	case ua.TimestampsToReturnNeither:
		dv.SourceTimestamp, dv.ServerTimestamp = time.Time{}, time.Time{}
	default:
		if dv.ServerTimestamp.IsZero() {
			dv.ServerTimestamp = now
		}
	}
	dv.SourcePicoseconds, dv.ServerPicoseconds = 0, 0
	dv.UpdateMask()
	return dv
}

// Browse result mask bits (Part 4, BrowseResultMask).
const (
	browseRefType   = 1
	browseIsForward = 2
	browseClass     = 4
	browseName      = 8
	browseDisplay   = 16
	browseTypeDef   = 32
)

// browse returns the references of a node that match bd.
func (a *uaSpace) browse(bd *ua.BrowseDescription) ([]*ua.ReferenceDescription, ua.StatusCode) {
	if bd == nil || bd.NodeID == nil {
		return nil, ua.StatusBadNodeIDInvalid
	}
	n := a.node(bd.NodeID)
	if n == nil {
		return nil, ua.StatusBadNodeIDUnknown
	}
	if bd.BrowseDirection > ua.BrowseDirectionBoth {
		return nil, ua.StatusBadBrowseDirectionInvalid
	}
	var want uint32
	if rt := bd.ReferenceTypeID; rt != nil && !(rt.Namespace() == 0 && rt.IntID() == 0) {
		if rt.Namespace() != 0 || !knownRefType(rt.IntID()) {
			return nil, ua.StatusBadReferenceTypeIDInvalid
		}
		want = rt.IntID()
	}
	var out []*ua.ReferenceDescription
	for _, r := range n.refs {
		switch bd.BrowseDirection {
		case ua.BrowseDirectionForward:
			if !r.forward {
				continue
			}
		case ua.BrowseDirectionInverse:
			if r.forward {
				continue
			}
		}
		// IncludeSubtypes=false asks for exactly the given type. gopcua's
		// server panics on this path (an index that never advances in
		// suitableRefType); here it is a comparison.
		if want != 0 && r.typ != want && !(bd.IncludeSubtypes && isRefSubtype(r.typ, want)) {
			continue
		}
		if bd.NodeClassMask != 0 && bd.NodeClassMask&uint32(r.target.class) == 0 {
			continue
		}
		out = append(out, refDescription(r, bd.ResultMask))
	}
	return out, ua.StatusGood
}

func refDescription(r uaRef, mask uint32) *ua.ReferenceDescription {
	if mask == 0 {
		mask = 63
	}
	// The encoder needs every pointer set, so fields the client did not
	// ask for get their null values rather than nil.
	d := &ua.ReferenceDescription{
		ReferenceTypeID: ua.NewTwoByteNodeID(0),
		NodeID:          ua.NewExpandedNodeID(r.target.id, "", 0),
		BrowseName:      &ua.QualifiedName{},
		DisplayName:     &ua.LocalizedText{},
		TypeDefinition:  ua.NewTwoByteExpandedNodeID(0),
	}
	if mask&browseRefType != 0 {
		d.ReferenceTypeID = ns0(r.typ)
	}
	if mask&browseIsForward != 0 {
		d.IsForward = r.forward
	}
	if mask&browseClass != 0 {
		d.NodeClass = r.target.class
	}
	if mask&browseName != 0 {
		d.BrowseName = r.target.browse
	}
	if mask&browseDisplay != 0 {
		d.DisplayName = r.target.display
	}
	if mask&browseTypeDef != 0 && r.target.typeDef != nil {
		d.TypeDefinition = ua.NewExpandedNodeID(r.target.typeDef, "", 0)
	}
	return d
}

// translate follows one browse path.
func (a *uaSpace) translate(bp *ua.BrowsePath) *ua.BrowsePathResult {
	res := &ua.BrowsePathResult{Targets: []*ua.BrowsePathTarget{}}
	if bp == nil || bp.StartingNode == nil {
		res.StatusCode = ua.StatusBadNodeIDInvalid
		return res
	}
	start := a.node(bp.StartingNode)
	if start == nil {
		res.StatusCode = ua.StatusBadNodeIDUnknown
		return res
	}
	if bp.RelativePath == nil || len(bp.RelativePath.Elements) == 0 {
		res.StatusCode = ua.StatusBadNothingToDo
		return res
	}
	cur := []*uaNode{start}
	for _, el := range bp.RelativePath.Elements {
		if el == nil || el.TargetName == nil || el.TargetName.Name == "" {
			res.StatusCode = ua.StatusBadBrowseNameInvalid
			return res
		}
		var want uint32
		if rt := el.ReferenceTypeID; rt != nil && !(rt.Namespace() == 0 && rt.IntID() == 0) {
			want = rt.IntID()
		}
		var next []*uaNode
		for _, n := range cur {
			for _, r := range n.refs {
				if r.forward == el.IsInverse {
					continue
				}
				if want != 0 && r.typ != want && !(el.IncludeSubtypes && isRefSubtype(r.typ, want)) {
					continue
				}
				if r.target.browse.NamespaceIndex == el.TargetName.NamespaceIndex && r.target.browse.Name == el.TargetName.Name {
					next = append(next, r.target)
				}
			}
		}
		if len(next) == 0 {
			res.StatusCode = ua.StatusBadNoMatch
			return res
		}
		cur = next
	}
	for _, n := range cur {
		res.Targets = append(res.Targets, &ua.BrowsePathTarget{
			TargetID:           ua.NewExpandedNodeID(n.id, "", 0),
			RemainingPathIndex: 0xFFFFFFFF,
		})
	}
	return res
}

// buildSpace builds the address space of one server of the pair.
func (s *Server) buildSpace() *uaSpace {
	a := newUASpace()
	p := s.pair

	object := func(nid *ua.NodeID, name string, typeDef uint32) *uaNode {
		return a.add(&uaNode{id: nid, class: ua.NodeClassObject, browse: qn(nid.Namespace(), name), typeDef: ns0(typeDef)})
	}
	variable := func(nid *ua.NodeID, name string, dataType uint32, rank int32, typeDef uint32, value func() *ua.DataValue) *uaNode {
		return a.add(&uaNode{
			id: nid, class: ua.NodeClassVariable, browse: qn(nid.Namespace(), name),
			typeDef: ns0(typeDef), dataType: ns0(dataType), valueRank: rank,
			access: 1, value: value,
		})
	}
	typeNode := func(i uint32, class ua.NodeClass, name string) *uaNode {
		return a.add(&uaNode{id: ns0(i), class: class, browse: qn(0, name)})
	}

	// Standard folders.
	root := object(ns0(id.RootFolder), "Root", id.FolderType)
	objects := object(ns0(id.ObjectsFolder), "Objects", id.FolderType)
	types := object(ns0(id.TypesFolder), "Types", id.FolderType)
	views := object(ns0(id.ViewsFolder), "Views", id.FolderType)
	link(root, id.Organizes, objects)
	link(root, id.Organizes, types)
	link(root, id.Organizes, views)
	objectTypes := object(ns0(id.ObjectTypesFolder), "ObjectTypes", id.FolderType)
	variableTypes := object(ns0(id.VariableTypesFolder), "VariableTypes", id.FolderType)
	dataTypes := object(ns0(id.DataTypesFolder), "DataTypes", id.FolderType)
	refTypes := object(ns0(id.ReferenceTypesFolder), "ReferenceTypes", id.FolderType)
	for _, f := range []*uaNode{objectTypes, variableTypes, dataTypes, refTypes} {
		link(types, id.Organizes, f)
	}

	// The types the nodes below reference, so that a client can read
	// their names. The lists are flat, not the full type hierarchy.
	for _, t := range []struct {
		i    uint32
		name string
	}{
		{id.BaseObjectType, "BaseObjectType"}, {id.FolderType, "FolderType"},
		{id.ServerType, "ServerType"}, {id.ServerCapabilitiesType, "ServerCapabilitiesType"},
		{id.ServerRedundancyType, "ServerRedundancyType"},
		{id.NonTransparentRedundancyType, "NonTransparentRedundancyType"},
	} {
		link(objectTypes, id.Organizes, typeNode(t.i, ua.NodeClassObjectType, t.name))
	}
	for _, t := range []struct {
		i    uint32
		name string
	}{
		{id.BaseVariableType, "BaseVariableType"}, {id.BaseDataVariableType, "BaseDataVariableType"},
		{id.PropertyType, "PropertyType"}, {id.ServerStatusType, "ServerStatusType"},
		{id.BuildInfoType, "BuildInfoType"},
	} {
		link(variableTypes, id.Organizes, typeNode(t.i, ua.NodeClassVariableType, t.name))
	}
	for _, t := range []struct {
		i    uint32
		name string
	}{
		{1, "Boolean"}, {3, "Byte"}, {5, "UInt16"}, {6, "Int32"}, {7, "UInt32"}, {8, "Int64"},
		{11, "Double"}, {12, "String"}, {13, "DateTime"}, {21, "LocalizedText"},
		{id.BaseDataType, "BaseDataType"}, {id.Duration, "Duration"}, {id.UtcTime, "UtcTime"},
		{id.LocaleID, "LocaleId"}, {id.BuildInfo, "BuildInfo"}, {id.RedundancySupport, "RedundancySupport"},
		{id.ServerState, "ServerState"}, {id.ServerStatusDataType, "ServerStatusDataType"},
	} {
		link(dataTypes, id.Organizes, typeNode(t.i, ua.NodeClassDataType, t.name))
	}
	refNodes := map[uint32]*uaNode{}
	for _, t := range []struct {
		i        uint32
		name     string
		inverse  string
		abstract bool
	}{
		{id.References, "References", "", true},
		{id.NonHierarchicalReferences, "NonHierarchicalReferences", "", true},
		{id.HierarchicalReferences, "HierarchicalReferences", "", true},
		{id.HasChild, "HasChild", "", true},
		{id.Organizes, "Organizes", "OrganizedBy", false},
		{id.Aggregates, "Aggregates", "", true},
		{id.HasSubtype, "HasSubtype", "SubtypeOf", false},
		{id.HasProperty, "HasProperty", "PropertyOf", false},
		{id.HasComponent, "HasComponent", "ComponentOf", false},
		{id.HasTypeDefinition, "HasTypeDefinition", "TypeDefinitionOf", false},
	} {
		n := typeNode(t.i, ua.NodeClassReferenceType, t.name)
		n.inverse, n.abstract = t.inverse, t.abstract
		refNodes[t.i] = n
	}
	link(refTypes, id.Organizes, refNodes[id.References])
	for child, parent := range refTypeParent {
		link(refNodes[parent], id.HasSubtype, refNodes[child])
	}

	// The Server object.
	srv := object(ns0(id.Server), "Server", id.ServerType)
	link(objects, id.Organizes, srv)
	property := func(parent *uaNode, i uint32, name string, dataType uint32, rank int32, value func() *ua.DataValue) *uaNode {
		n := variable(ns0(i), name, dataType, rank, id.PropertyType, value)
		link(parent, id.HasProperty, n)
		return n
	}
	component := func(parent *uaNode, i uint32, name string, dataType uint32, typeDef uint32, value func() *ua.DataValue) *uaNode {
		n := variable(ns0(i), name, dataType, -1, typeDef, value)
		link(parent, id.HasComponent, n)
		return n
	}
	uris := []string{p.cfg.uris[s.index], p.cfg.uris[1-s.index]}
	property(srv, id.Server_ServerArray, "ServerArray", 12, 1, constValue(uris))
	property(srv, id.Server_NamespaceArray, "NamespaceArray", 12, 1,
		constValue([]string{"http://opcfoundation.org/UA/", SimNamespaceURI}))
	s.nodeServiceLevel = property(srv, id.Server_ServiceLevel, "ServiceLevel", 3, -1, s.serviceLevelValue)

	s.nodeStatus = component(srv, id.Server_ServerStatus, "ServerStatus", id.ServerStatusDataType, id.ServerStatusType, s.statusValue)
	component(s.nodeStatus, id.Server_ServerStatus_StartTime, "StartTime", id.UtcTime, id.BaseDataVariableType,
		func() *ua.DataValue { return nowValue(s.startTime()) })
	s.nodeCurrentTime = component(s.nodeStatus, id.Server_ServerStatus_CurrentTime, "CurrentTime", id.UtcTime, id.BaseDataVariableType,
		func() *ua.DataValue { return nowValue(time.Now()) })
	s.nodeState = component(s.nodeStatus, id.Server_ServerStatus_State, "State", id.ServerState, id.BaseDataVariableType,
		func() *ua.DataValue { return nowValue(int32(s.serverState())) })
	build := component(s.nodeStatus, id.Server_ServerStatus_BuildInfo, "BuildInfo", id.BuildInfo, id.BuildInfoType,
		constValue(ua.NewExtensionObject(s.buildInfo())))
	bi := s.buildInfo()
	for _, c := range []struct {
		i     uint32
		name  string
		value any
	}{
		{id.Server_ServerStatus_BuildInfo_ProductName, "ProductName", bi.ProductName},
		{id.Server_ServerStatus_BuildInfo_ProductName + 1, "ProductUri", bi.ProductURI},
		{id.Server_ServerStatus_BuildInfo_ProductName + 2, "ManufacturerName", bi.ManufacturerName},
		{id.Server_ServerStatus_BuildInfo_ProductName + 3, "SoftwareVersion", bi.SoftwareVersion},
		{id.Server_ServerStatus_BuildInfo_ProductName + 4, "BuildNumber", bi.BuildNumber},
	} {
		component(build, c.i, c.name, 12, id.BaseDataVariableType, constValue(c.value))
	}
	component(build, id.Server_ServerStatus_BuildInfo_ProductName+5, "BuildDate", id.UtcTime, id.BaseDataVariableType,
		constValue(bi.BuildDate))
	component(s.nodeStatus, id.Server_ServerStatus_SecondsTillShutdown, "SecondsTillShutdown", 7, id.BaseDataVariableType,
		func() *ua.DataValue { return nowValue(uint32(0)) })
	component(s.nodeStatus, id.Server_ServerStatus_ShutdownReason, "ShutdownReason", 21, id.BaseDataVariableType,
		constValue(ua.NewLocalizedText("")))

	caps := object(ns0(id.Server_ServerCapabilities), "ServerCapabilities", id.ServerCapabilitiesType)
	link(srv, id.HasComponent, caps)
	property(caps, id.Server_ServerCapabilities_ServerProfileArray, "ServerProfileArray", 12, 1,
		constValue([]string{"http://opcfoundation.org/UA-Profile/Server/MicroEmbeddedDevice"}))
	property(caps, id.Server_ServerCapabilities_LocaleIDArray, "LocaleIdArray", id.LocaleID, 1, constValue([]string{"en"}))
	property(caps, id.Server_ServerCapabilities_MaxBrowseContinuationPoints, "MaxBrowseContinuationPoints", 5, -1,
		constValue(uint16(maxContinuationPoints)))

	mode := p.cfg.redundancy
	redType := uint32(id.ServerRedundancyType)
	if mode != ua.RedundancySupportNone && mode != ua.RedundancySupportTransparent {
		redType = id.NonTransparentRedundancyType
	}
	red := object(ns0(id.Server_ServerRedundancy), "ServerRedundancy", redType)
	link(srv, id.HasComponent, red)
	property(red, id.Server_ServerRedundancy_RedundancySupport, "RedundancySupport", id.RedundancySupport, -1,
		constValue(int32(mode)))
	if redType == id.NonTransparentRedundancyType {
		property(red, id.Server_ServerRedundancy_ServerURIArray, "ServerUriArray", 12, 1, constValue(uris))
	}

	// The simulated tags: Objects/Sim/Tags0000, Tags0100, ... and
	// Objects/Sim/Setpoints. Folders hold at most tagsPerFolder tags so
	// that every Browse answer fits in one 64 KiB message.
	sim := object(ua.NewStringNodeID(simNS, "Sim"), "Sim", id.FolderType)
	link(objects, id.Organizes, sim)
	var folder *uaNode
	s.tagNodes = make([]*uaNode, len(p.gen))
	for i, t := range p.gen {
		if i%tagsPerFolder == 0 {
			name := fmt.Sprintf("Tags%04d", i)
			folder = object(ua.NewStringNodeID(simNS, name), name, id.FolderType)
			link(sim, id.Organizes, folder)
		}
		n := variable(t.NodeID(), t.Name, t.Kind.dataType(), -1, id.BaseDataVariableType, s.tagValue(i))
		n.desc = ua.NewLocalizedText(t.Kind.String() + " tag")
		n.minSample = float64(p.cfg.tagInterval) / float64(time.Millisecond)
		link(folder, id.Organizes, n)
		s.tagNodes[i] = n
	}
	if len(p.setpoints) > 0 {
		folder = object(ua.NewStringNodeID(simNS, "Setpoints"), "Setpoints", id.FolderType)
		link(sim, id.Organizes, folder)
	}
	s.setpointNodes = make([]*uaNode, len(p.setpoints))
	for j, t := range p.setpoints {
		n := variable(t.NodeID(), t.Name, t.Kind.dataType(), -1, id.BaseDataVariableType, s.setpointValue(j))
		n.desc = ua.NewLocalizedText("writable setpoint")
		n.access = 3 // CurrentRead | CurrentWrite
		n.setpoint = j
		link(folder, id.Organizes, n)
		s.setpointNodes[j] = n
	}
	return a
}

// tagsPerFolder bounds the references of a folder (about 60 bytes each in a
// Browse answer).
const tagsPerFolder = 100

// constValue is a value function for a value that never changes.
func constValue(v any) func() *ua.DataValue {
	variant := ua.MustVariant(v)
	return func() *ua.DataValue {
		return &ua.DataValue{Value: variant, EncodingMask: ua.DataValueValue}
	}
}

// nowValue is a DataValue whose source and server timestamps are now.
func nowValue(v any) *ua.DataValue {
	now := time.Now()
	dv := &ua.DataValue{Value: ua.MustVariant(v), SourceTimestamp: now, ServerTimestamp: now}
	dv.UpdateMask()
	return dv
}
