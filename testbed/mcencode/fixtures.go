package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	prefix     = "huawei.com/Ascend910"
	updateTime = int64(1767254400) // 2026-01-01T08:00:00Z, seconds
	faultMs    = int64(1767254395123)
	node0      = "mc-node-0"
	node1      = "mc-node-1"
	switchCode = "[0x00f103b0,155907,na,na]"
)

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
	for name, obj := range encodedFixtures() {
		out[name] = obj
	}
	return out
}

func i64(v int64) *int64 { return &v }

func must(cm configMap, err error) configMap {
	if err != nil {
		panic(err)
	}
	return cm
}

// encodedFixtures are made by the same builders as `mcencode serve` (what the testbed writes), including a
// ClusterD report aggregated from per-node ConfigMaps the builders made.
func encodedFixtures() map[string]any {
	dev := must(deviceCMOf(deviceReq{
		Node: node0, UpdateTime: updateTime,
		Faults: []chipFaultReq{
			{Chip: 3, Codes: []string{"80E3A201", "80E18402"}, Level: "SeparateNPU", TimeMs: i64(faultMs)},
			{Chip: 1, Codes: []string{"81078603"}, Level: "PreSeparateNPU", FaultType: "CardNetworkUnhealthy"},
		},
		Recovering: []int{6},
	}))
	a3 := must(deviceCMOf(deviceReq{
		Node: node1, UpdateTime: updateTime,
		Switch: &switchReq{Enabled: true, Events: []switchEventReq{
			{Code: switchCode, SwitchChip: 0, Port: 3, Level: "Separate", TimeMs: i64(faultMs), Severity: 3},
			{Code: "[0x00f1ff09,155912,cpu,na]", SwitchChip: 1, Port: 7, Level: "SubHealthFault", Severity: 1},
		}},
	}))
	noded := must(nodeCMOf(nodeReq{
		Node: node0, UpdateTime: updateTime,
		Devs: []nodeDevReq{{DeviceType: "CPU", DeviceId: 1, Codes: []string{"00000011"}, Level: "SeparateFault"}},
	}))
	pub := must(publicCMOf(publicReq{Name: "pingmesh-public-fault", Namespace: dlNS, Info: pubFaultInfo{
		Id: "pingmesh-0001", TimeStamp: faultMs, Version: "1.0", Resource: "pingmesh",
		Faults: []pubFault{{
			FaultId: "fault-00000001", FaultType: "NPU", FaultCode: "220001001", FaultTime: faultMs,
			Assertion: "occur", Influence: []influence{{NodeName: node0, DeviceIds: []int32{5}}},
			Description: "link down",
		}},
	}}))
	agg := newClusterd()
	for _, cm := range []configMap{dev, a3, noded} {
		if _, err := agg.put(cm); err != nil {
			panic(err)
		}
	}
	return map[string]any{
		"testbed-deviceinfo-chip-faults.json": dev,
		"testbed-deviceinfo-a3-switch.json":   a3,
		"testbed-nodeinfo-separate.json":      noded,
		"testbed-publicfault-occur.json":      pub,
		"testbed-clusterd-report.json":        list{APIVersion: "v1", Kind: "List", Items: agg.report()},
	}
}

// writeFixtures writes the MindCluster-format fixtures into dir and the per-node ones of tests/fixtures/ into
// top (none when top is empty), indented as `kubectl get -o json` prints.
func writeFixtures(dir, top string) error {
	if top != "" {
		if err := writeSet(top, topFixtures()); err != nil {
			return err
		}
	}
	return writeSet(dir, fixtures())
}

func writeSet(dir string, set map[string]any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, obj := range set {
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// topFixtures are the device plugin and NodeD fixtures of tests/fixtures/ (per-node shapes the unit tests read
// by name), made by the same builders as what the testbed writes.
func topFixtures() map[string]any {
	one := func(chip int, codes []string, level, ftype string, ms int64) []chipFaultReq {
		return []chipFaultReq{{Chip: chip, Codes: codes, Level: level, FaultType: ftype, TimeMs: i64(ms)}}
	}
	multi := one(5, []string{"80E3A201", "80E21007"}, "SeparateNPU", "", 1767229200456)
	multi[0].CodeLevels = map[string]string{"80E21007": "NotHandleFault"}
	devices := map[string]deviceReq{
		"deviceinfo-healthy.json": {Node: "worker-01", UpdateTime: 1767225600},
		"deviceinfo-chip-restartbusiness.json": {
			Node: "worker-07", UpdateTime: 1767225603, Faults: one(3, []string{"80E01801"}, "RestartBusiness", "", 1767225601123),
		},
		"deviceinfo-chip-separate-multi-code.json": {Node: "worker-02", UpdateTime: 1767229202, Faults: multi},
		"deviceinfo-network-preseparate.json": {
			Node: "worker-03", UpdateTime: 1767232801,
			Faults: one(1, []string{"81078603"}, "PreSeparateNPU", "CardNetworkUnhealthy", 1767232800789),
		},
		"deviceinfo-npu-prefix-restartnpu.json": {
			Node: "worker-950-01", Prefix: "huawei.com/npu", UpdateTime: 1767236401,
			Faults: one(6, []string{"80E18005"}, "RestartNPU", "", 1767236400000),
		},
		"deviceinfo-bad-checkcode.json": {
			Node: "worker-04", UpdateTime: 1767240001, CheckCode: strings.Repeat("0", 64),
			Faults: one(2, []string{"A8028801"}, "SeparateNPU", "", 1767240000000),
		},
	}
	out := map[string]any{}
	for name, r := range devices {
		out[name] = must(deviceCMOf(r))
	}
	const cst = 8 * 3600 // NodeD formats updateTime in its node's zone, here UTC+8
	out["nodeinfo-preseparate-memory.json"] = must(nodeCMOf(nodeReq{
		Node: "worker-06", UpdateTime: 1767229800, UTCOffsetS: cst,
		Devs: []nodeDevReq{{DeviceType: "Memory", DeviceId: 3, Codes: []string{"02000007"}, Level: "PreSeparateFault"}},
	}))
	out["nodeinfo-unhealthy-cpu.json"] = must(nodeCMOf(nodeReq{
		Node: "worker-05", UpdateTime: 1767225605, UTCOffsetS: cst,
		Devs: []nodeDevReq{{DeviceType: "CPU", DeviceId: 1, Codes: []string{"00000011"}, Level: "SeparateFault"}},
	}))
	return out
}
