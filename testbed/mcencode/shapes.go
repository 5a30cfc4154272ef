// Command mcencode writes what MindCluster's components write, by marshalling struct definitions of our own,
// with MindCluster's field names and Go types, through Go's encoding/json: byte layout, map-key order, HTML-safe
// escapes and CheckCode are Go's own, so a mistake of a Python encoder cannot hide one of the agent's parsers.
//
//	mcencode fixtures [-out DIR] [-top DIR]   writes the fixtures of tests/fixtures/mindcluster/ and the
//	                             per-node ones of tests/fixtures/
//	mcencode serve               reads one JSON request per line on stdin, answers one JSON line each on stdout
//	                             (the testbed's injector, simulated device plugin, NodeD and ClusterD writer)
//
// The shapes (field names, types, JSON tags, which struct embeds which) were read from Ascend/mind-cluster
// at commit 22bb3d98:
//   - component/ascend-device-plugin/pkg/common/proto.go: NodeDeviceInfoCache, NodeDeviceInfo, DeviceFault,
//     FaultTimeAndLevel, SwitchFaultInfo; component/ascend-device-plugin/pkg/common/device.go: the switch event
//     encoded into each SwitchFaultInfo.FaultCode string, the switch level and NodeStatus names and how the
//     most severe event sets both; component/ascend-device-plugin/pkg/kubeclient/client_server.go: the
//     ConfigMap keys (SwitchInfoCfg only on A3) and CheckCode (lower-case hex SHA-256 of json.Marshal(DeviceInfo));
//   - component/noded/pkg/common/type.go: NodeInfoCM, FaultDevInfo, FaultDev; component/noded/pkg/reporter/
//     cmreporter/configmap_reporter.go: keys NodeInfo and updateTime (RFC 3339), label mx-consumer-cim;
//   - component/clusterd/pkg/common/constant/type.go: DeviceInfo, DeviceInfoCM, NodeInfo, NodeInfoCM, FaultDev,
//     SwitchInfoFromCM, SimpleSwitchFaultInfo (the flat entries of cluster-info-*);
//     component/clusterd/pkg/application/resource/report.go: one data key named like the ConfigMap, an empty
//     string when there is nothing to report, the number of device/switch ConfigMaps never shrinks;
//     component/clusterd/pkg/domain/{device,switchinfo,node}/*_util.go: what ClusterD reads from the per-node
//     ConfigMaps (CheckCode verified, switch entries named mindx-dl-switchinfo-<node>, NodeInfo.UpdateTime in
//     milliseconds from updateTime), chunks of at most 800 KiB; component/clusterd/pkg/common/constant/
//     configmap.go: the names and the label mx-consumer-volcano;
//   - component/ascend-common/api/publicfault.go: PubFaultInfo, Fault, Influence; api/consts.go: key PublicFault,
//     label mc-consumer-publicfault.
//
// Only the standard library; no network.
package main

// ---- device plugin (per node) ----

type faultTimeAndLevel struct {
	FaultTime  int64  `json:"fault_time"`
	FaultLevel string `json:"fault_level"`
}

type deviceFault struct {
	FaultType            string                       `json:"fault_type"`
	NPUName              string                       `json:"npu_name"`
	LargeModelFaultLevel string                       `json:"large_model_fault_level"`
	FaultLevel           string                       `json:"fault_level"`
	FaultHandling        string                       `json:"fault_handling"`
	FaultCode            string                       `json:"fault_code"`
	FaultTimeAndLevelMap map[string]faultTimeAndLevel `json:"fault_time_and_level_map"`
}

type nodeDeviceInfo struct {
	DeviceList map[string]string
	UpdateTime int64
}

type nodeDeviceInfoCache struct {
	DeviceInfo  nodeDeviceInfo
	SuperPodID  int32
	ServerIndex int32
	CheckCode   string
	RackID      *int32 `json:"RackID,omitempty"`
}

type switchFaultInfo struct {
	FaultCode            []string
	FaultLevel           string
	UpdateTime           int64
	NodeStatus           string
	FaultTimeAndLevelMap map[string]faultTimeAndLevel
}

type switchEvent struct {
	EventType          uint
	AssembledFaultCode string
	PeerPortDevice     uint
	PeerPortId         uint
	SwitchChipId       uint
	SwitchPortId       uint
	Severity           uint
	Assertion          uint
	AlarmRaisedTime    int64
}

// ---- NodeD (per node) ----

type faultDev struct {
	DeviceType string
	DeviceId   int64
	FaultCode  []string
	FaultLevel string
}

type nodeInfoNoName struct {
	FaultDevList []*faultDev
	NodeStatus   string
}

type nodeInfoCM struct {
	NodeInfo  nodeInfoNoName
	CheckCode string
}

// ---- ClusterD (cluster-info-*) ----

type deviceInfoNoName struct {
	DeviceList map[string]string
	UpdateTime int64
}

// deviceInfoCM is how ClusterD reads a device plugin's DeviceInfoCfg (RackID not a pointer there).
type deviceInfoCM struct {
	DeviceInfo  deviceInfoNoName
	SuperPodID  int32
	RackID      int32
	ServerIndex int32
	CheckCode   string
}

type clusterDeviceInfo struct {
	deviceInfoNoName
	CmName      string
	SuperPodID  int32
	RackID      int32
	ServerIndex int32
}

type clusterNodeInfo struct {
	nodeInfoNoName
	CmName     string
	UpdateTime int64
}

type switchFaultInfoFromCm struct {
	FaultCode            []string
	FaultLevel           string
	UpdateTime           int64
	NodeStatus           string
	FaultTimeAndLevelMap map[string]faultTimeAndLevel
}

type clusterSwitchInfo struct {
	switchFaultInfoFromCm
	CmName string
}

// ---- public faults (written by other monitors for ClusterD) ----

type influence struct {
	NodeName  string  `json:"nodeName"`
	NodeSN    string  `json:"nodeSN"`
	DeviceIds []int32 `json:"deviceIds"`
}

type pubFault struct {
	FaultId       string            `json:"faultId"`
	FaultType     string            `json:"faultType"`
	FaultCode     string            `json:"faultCode"`
	FaultTime     int64             `json:"faultTime"`
	Assertion     string            `json:"assertion"`
	FaultLocation map[string]string `json:"faultLocation"`
	Influence     []influence       `json:"influence"`
	Description   string            `json:"description"`
}

type pubFaultInfo struct {
	Id        string     `json:"id"`
	TimeStamp int64      `json:"timestamp"`
	Version   string     `json:"version"`
	Resource  string     `json:"resource"`
	Faults    []pubFault `json:"faults"`
}

// ---- Kubernetes ConfigMap as `kubectl get cm -o json` prints it (the fields we need) ----

type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
}

type configMap struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   objectMeta        `json:"metadata"`
	Data       map[string]string `json:"data"`
}

type list struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Items      []configMap `json:"items"`
	Metadata   struct{}    `json:"metadata"`
}
