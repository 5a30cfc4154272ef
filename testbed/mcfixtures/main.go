// Command mcfixtures writes the MindCluster-format fixtures of tests/fixtures/mindcluster/ by marshalling
// struct definitions of our own, with MindCluster's field names and Go types, through Go's encoding/json.
// The Python parsers are tested on its output, so a mistake of a Python encoder cannot hide one of a parser.
//
// The shapes (field names, types, JSON tags, which struct embeds which) were read from Ascend/mind-cluster
// at commit 22bb3d98:
//   - component/ascend-device-plugin/pkg/common/proto.go: NodeDeviceInfoCache, NodeDeviceInfo, DeviceFault,
//     FaultTimeAndLevel, SwitchFaultInfo; component/ascend-device-plugin/pkg/common/device.go: the switch event
//     encoded into each SwitchFaultInfo.FaultCode string, the switch level and NodeStatus names;
//     component/ascend-device-plugin/pkg/kubeclient/client_server.go: the ConfigMap keys and CheckCode
//     (lower-case hex SHA-256 of json.Marshal(DeviceInfo));
//   - component/clusterd/pkg/common/constant/type.go: DeviceInfo, NodeInfo, FaultDev, SwitchInfoFromCM (the flat
//     entries of cluster-info-*); component/clusterd/pkg/application/resource/report.go: one data key named like
//     the ConfigMap, an empty string when there is nothing to report; component/clusterd/pkg/domain/node/
//     node_util.go: NodeInfo.UpdateTime in milliseconds; component/clusterd/pkg/application/publicfault/
//     fault_collector.go: PublicFault fault_time in seconds.
//
// Usage: go run . -out ../../tests/fixtures/mindcluster   (only the standard library; no network)
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

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

// ---- ClusterD (cluster-info-*) ----

type deviceInfoNoName struct {
	DeviceList map[string]string
	UpdateTime int64
}

type clusterDeviceInfo struct {
	deviceInfoNoName
	CmName      string
	SuperPodID  int32
	RackID      int32
	ServerIndex int32
}

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

const (
	prefix     = "huawei.com/Ascend910"
	updateTime = int64(1767254400) // 2026-01-01T08:00:00Z, seconds
	faultMs    = int64(1767254395123)
	node0      = "mc-node-0"
	node1      = "mc-node-1"
	switchCode = "[0x00f103b0,155907,na,na]"
)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func checkCode(info nodeDeviceInfo) string {
	sum := sha256.Sum256([]byte(mustJSON(info)))
	return hex.EncodeToString(sum[:])
}

func chips(ids ...int) string {
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		names = append(names, fmt.Sprintf("Ascend910-%d", id))
	}
	return strings.Join(names, ",")
}

func fault(ftype, chip, level, code string, t int64) deviceFault {
	return deviceFault{
		FaultType: ftype, NPUName: chip, LargeModelFaultLevel: level, FaultLevel: level, FaultHandling: level,
		FaultCode:            code,
		FaultTimeAndLevelMap: map[string]faultTimeAndLevel{code: {FaultTime: t, FaultLevel: level}},
	}
}

// faultyDeviceList: one chip fault, one network fault, one public fault (ClusterD's, fault_time in seconds) and
// one element at a healthy level (NormalNPU), as ClusterD writes them back into DeviceList.
func faultyDeviceList() map[string]string {
	faults := []deviceFault{
		fault("CardNetworkUnhealthy", "Ascend910-1", "PreSeparateNPU", "81078603", faultMs),
		fault("CardUnhealthy", "Ascend910-3", "SeparateNPU", "80E3A201", faultMs),
		fault("PublicFault", "Ascend910-5", "SeparateNPU", "220001001", updateTime-5),
		fault("CardUnhealthy", "Ascend910-6", "NormalNPU", "80E01801", faultMs),
	}
	return map[string]string{
		prefix:                       chips(0, 2, 4, 6, 7),
		prefix + "-Fault":            mustJSON(faults),
		prefix + "-NetworkUnhealthy": "Ascend910-1",
		prefix + "-Unhealthy":        chips(3, 5),
		prefix + "-Recovering":       "",
	}
}

func healthyDeviceList() map[string]string {
	return map[string]string{
		prefix:                       chips(0, 1, 2, 3, 4, 5, 6, 7),
		prefix + "-Fault":            "[]",
		prefix + "-NetworkUnhealthy": "",
		prefix + "-Unhealthy":        "",
		prefix + "-Recovering":       "",
	}
}

func clusterCM(name string, value string) configMap {
	return configMap{
		APIVersion: "v1", Kind: "ConfigMap",
		Metadata: objectMeta{Name: name, Namespace: "mindx-dl", Labels: map[string]string{"mx-consumer-volcano": "true"}},
		Data:     map[string]string{name: value},
	}
}

func deviceCM(node string, dl map[string]string, sw *switchFaultInfo, rackID *int32) configMap {
	info := nodeDeviceInfo{DeviceList: dl, UpdateTime: updateTime}
	cache := nodeDeviceInfoCache{DeviceInfo: info, SuperPodID: 0, ServerIndex: 3, CheckCode: checkCode(info), RackID: rackID}
	data := map[string]string{"DeviceInfoCfg": mustJSON(cache), "ManuallySeparateNPU": ""}
	if sw != nil {
		data["SwitchInfoCfg"] = mustJSON(*sw)
	}
	return configMap{
		APIVersion: "v1", Kind: "ConfigMap",
		Metadata: objectMeta{
			Name: "mindx-dl-deviceinfo-" + node, Namespace: "kube-system",
			Labels: map[string]string{"mx-consumer-cim": "true"},
		},
		Data: data,
	}
}

func switchSeparate() switchFaultInfo {
	ev := switchEvent{
		EventType: 1, AssembledFaultCode: switchCode, PeerPortDevice: 0xFFFF, PeerPortId: 0, SwitchChipId: 0,
		SwitchPortId: 3, Severity: 3, Assertion: 1, AlarmRaisedTime: faultMs,
	}
	return switchFaultInfo{
		FaultCode: []string{mustJSON(ev)}, FaultLevel: "Separate", UpdateTime: updateTime, NodeStatus: "UnHealthy",
		FaultTimeAndLevelMap: map[string]faultTimeAndLevel{
			switchCode + "_0_3": {FaultTime: faultMs, FaultLevel: "Separate"},
		},
	}
}

func switchHealthy() switchFaultInfo {
	return switchFaultInfo{
		FaultCode: []string{}, FaultLevel: "", UpdateTime: updateTime, NodeStatus: "Healthy",
		FaultTimeAndLevelMap: map[string]faultTimeAndLevel{},
	}
}

func fixtures() map[string]any {
	rack := int32(1)
	devs := map[string]*clusterDeviceInfo{
		"mindx-dl-deviceinfo-" + node0: {
			deviceInfoNoName: deviceInfoNoName{DeviceList: faultyDeviceList(), UpdateTime: updateTime},
			CmName:           "mindx-dl-deviceinfo-" + node0, SuperPodID: -2, RackID: 0, ServerIndex: -2,
		},
		"mindx-dl-deviceinfo-" + node1: {
			deviceInfoNoName: deviceInfoNoName{DeviceList: healthyDeviceList(), UpdateTime: updateTime},
			CmName:           "mindx-dl-deviceinfo-" + node1, SuperPodID: -2, RackID: 0, ServerIndex: -2,
		},
	}
	nodes := map[string]*clusterNodeInfo{
		"mindx-dl-nodeinfo-" + node0: {
			nodeInfoNoName: nodeInfoNoName{
				FaultDevList: []*faultDev{{DeviceType: "CPU", DeviceId: 1, FaultCode: []string{"00000011"}, FaultLevel: "SeparateFault"}},
				NodeStatus:   "UnHealthy",
			},
			CmName: "mindx-dl-nodeinfo-" + node0, UpdateTime: updateTime * 1000,
		},
		"mindx-dl-nodeinfo-" + node1: {
			nodeInfoNoName: nodeInfoNoName{FaultDevList: []*faultDev{}, NodeStatus: "Healthy"},
			CmName:         "mindx-dl-nodeinfo-" + node1,
		},
	}
	sep, ok := switchSeparate(), switchHealthy()
	switches := map[string]*clusterSwitchInfo{
		"mindx-dl-switchinfo-" + node0: {switchFaultInfoFromCm: switchFaultInfoFromCm(sep), CmName: "mindx-dl-switchinfo-" + node0},
		"mindx-dl-switchinfo-" + node1: {switchFaultInfoFromCm: switchFaultInfoFromCm(ok), CmName: "mindx-dl-switchinfo-" + node1},
	}
	device := clusterCM("cluster-info-device-0", mustJSON(devs))
	node := clusterCM("cluster-info-node-cm", mustJSON(nodes))
	sw := clusterCM("cluster-info-switch-0", mustJSON(switches))
	var zero switchFaultInfo // a device plugin with switch faults off, or not on A3: FaultCode is null
	variants := healthyDeviceList()
	variants[prefix] = chips(0, 1, 2, 3, 4, 5)
	variants[prefix+"-Unhealthy"] = chips(6, 7)
	variants[prefix+"-Fault"] = mustJSON([]deviceFault{
		fault("PublicFault", "Ascend910-6", "SeparateNPU", "220001001", updateTime-5),
		fault("CardUnhealthy", "Ascend910-7", "RestartNPU", "80E18005", faultMs),
		fault("CardNetworkUnhealthy", "Ascend910-2", "NormalNetwork", "81078603", faultMs),
		fault("CardUnhealthy", "Ascend910-4", "NormalNPU", "80E01801", faultMs),
	})
	out := map[string]any{
		"clusterd-device-faults.json":        device,
		"clusterd-device-empty.json":         clusterCM("cluster-info-device-0", ""),
		"clusterd-node-fault.json":           node,
		"clusterd-node-empty.json":           clusterCM("cluster-info-node-cm", ""),
		"clusterd-switch-separate.json":      sw,
		"clusterd-switch-empty.json":         clusterCM("cluster-info-switch-0", ""),
		"deviceinfo-a3-switch-separate.json": deviceCM(node0, healthyDeviceList(), &sep, &rack),
		"deviceinfo-a3-switch-healthy.json":  deviceCM(node0, healthyDeviceList(), &ok, &rack),
		"deviceinfo-a3-switch-null.json":     deviceCM(node0, healthyDeviceList(), &zero, nil),
		"deviceinfo-fault-variants.json":     deviceCM(node1, variants, nil, nil),
		"clusterd-list.json":                 list{APIVersion: "v1", Kind: "List", Items: []configMap{device, node, sw}},
	}
	return out
}

func main() {
	dir := flag.String("out", "../../tests/fixtures/mindcluster", "folder to write the fixtures into")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, obj := range fixtures() {
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(*dir, name), append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
