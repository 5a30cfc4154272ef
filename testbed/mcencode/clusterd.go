package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	clusterDevice  = "cluster-info-device-"
	clusterNode    = "cluster-info-node-cm"
	clusterSwitch  = "cluster-info-switch-"
	maxChunkBytes  = 800 * 1024 // ClusterD's maxCmDataSize: a ConfigMap holds at most 1 MiB
	clusterDefault = dlNS
)

// clusterd holds what ClusterD has read from the per-node ConfigMaps (device plugin, NodeD, A3 switch info)
// and reports it the way ClusterD's reporter does.
type clusterd struct {
	devices   map[string]*clusterDeviceInfo // by device ConfigMap name
	nodes     map[string]*clusterNodeInfo   // by NodeD ConfigMap name
	switches  map[string]*clusterSwitchInfo // by mindx-dl-switchinfo-<node>
	deviceCMs int                           // ConfigMaps ever written: ClusterD never shrinks the count,
	switchCMs int                           // the ones no longer needed get an empty string
	maxChunk  int
	outNS     string
	// used holds, per node, the chips that pods not yet Failed or Succeeded hold (their huawei.com/AscendReal
	// annotation): ClusterD's PreSeparate rules look at it (component/clusterd/pkg/domain/pod/pod_util.go
	// GetUsedDevicesByNodeName).
	used map[string]map[string]bool
}

func newClusterd() *clusterd {
	return &clusterd{
		devices: map[string]*clusterDeviceInfo{}, nodes: map[string]*clusterNodeInfo{},
		switches: map[string]*clusterSwitchInfo{}, maxChunk: maxChunkBytes, outNS: clusterDefault,
		used: map[string]map[string]bool{},
	}
}

// put reads one per-node ConfigMap as ClusterD's informer does (label mx-consumer-cim=true; device plugin ones in
// kube-system, NodeD ones in mindx-dl). A ConfigMap ClusterD would reject (no key, bad JSON, CheckCode mismatch)
// is an error and changes nothing. Others are ignored (returns false).
func (c *clusterd) put(cm configMap) (bool, error) {
	name, ns := cm.Metadata.Name, cm.Metadata.Namespace
	switch {
	case ns == deviceNS && strings.HasPrefix(name, devicePrefix):
		text, ok := cm.Data[keyDevice]
		if !ok {
			return false, fmt.Errorf("configmap %s has no %s", name, keyDevice)
		}
		var in deviceInfoCM
		if err := json.Unmarshal([]byte(text), &in); err != nil {
			return false, fmt.Errorf("configmap %s: %s: %v", name, keyDevice, err)
		}
		if hashOf(in.DeviceInfo) != in.CheckCode {
			return false, fmt.Errorf("configmap %s: CheckCode does not match DeviceInfo", name)
		}
		var sw *clusterSwitchInfo
		if text, ok := cm.Data[keySwitch]; ok {
			var s switchFaultInfoFromCm
			if err := json.Unmarshal([]byte(text), &s); err != nil {
				return false, fmt.Errorf("configmap %s: %s: %v", name, keySwitch, err)
			}
			// ClusterD decodes each event and encodes it again when it reports.
			codes := make([]string, 0, len(s.FaultCode))
			for i, raw := range s.FaultCode {
				var ev switchEvent
				if err := json.Unmarshal([]byte(raw), &ev); err != nil {
					return false, fmt.Errorf("configmap %s: %s.FaultCode[%d]: %v", name, keySwitch, i, err)
				}
				codes = append(codes, mustJSON(ev))
			}
			s.FaultCode = codes
			node := strings.TrimPrefix(name, devicePrefix)
			sw = &clusterSwitchInfo{switchFaultInfoFromCm: s, CmName: switchPrefix + node}
		}
		c.devices[name] = &clusterDeviceInfo{
			deviceInfoNoName: in.DeviceInfo, CmName: name, SuperPodID: in.SuperPodID, RackID: in.RackID,
			ServerIndex: in.ServerIndex,
		}
		if sw != nil {
			c.switches[sw.CmName] = sw
		}
		return true, nil
	case ns == dlNS && strings.HasPrefix(name, nodePrefix):
		text, ok := cm.Data[keyNode]
		if !ok {
			return false, fmt.Errorf("configmap %s has no key: %s", name, keyNode)
		}
		var in nodeInfoCM
		if err := json.Unmarshal([]byte(text), &in); err != nil {
			return false, fmt.Errorf("configmap %s: %s: %v", name, keyNode, err)
		}
		if hashOf(in.NodeInfo) != in.CheckCode {
			return false, fmt.Errorf("configmap %s: CheckCode does not match NodeInfo", name)
		}
		var ms int64
		if t := cm.Data[keyNodeTime]; t != "" {
			if at, err := time.Parse(time.RFC3339, t); err == nil {
				ms = at.UnixMilli()
			}
		}
		c.nodes[name] = &clusterNodeInfo{nodeInfoNoName: in.NodeInfo, CmName: name, UpdateTime: ms}
		return true, nil
	}
	return false, nil
}

// remove forgets a deleted per-node ConfigMap (a device one takes its switch entry with it).
func (c *clusterd) remove(namespace, name string) bool {
	switch {
	case namespace == deviceNS && strings.HasPrefix(name, devicePrefix):
		_, had := c.devices[name]
		delete(c.devices, name)
		delete(c.switches, switchPrefix+strings.TrimPrefix(name, devicePrefix))
		return had
	case namespace == dlNS && strings.HasPrefix(name, nodePrefix):
		_, had := c.nodes[name]
		delete(c.nodes, name)
		return had
	}
	return false
}

// chunks marshals `entries` (name -> already marshalled entry) into JSON objects of at most maxChunk bytes,
// in sorted key order; a single entry larger than that gets a chunk of its own, as ClusterD does.
func chunks[T any](entries map[string]T, maxChunk int) []string {
	if len(entries) == 0 {
		return nil
	}
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	part := map[string]T{}
	size := 2 // {}
	for _, k := range keys {
		one := len(mustJSON(k)) + 1 + len(mustJSON(entries[k]))
		extra := one
		if len(part) > 0 {
			extra++ // the comma
		}
		if len(part) > 0 && size+extra > maxChunk {
			out = append(out, mustJSON(part))
			part, size, extra = map[string]T{}, 2, one
		}
		part[k] = entries[k]
		size += extra
	}
	return append(out, mustJSON(part))
}

// setUsed replaces what ClusterD knows of the chips in use: node name -> chip names (e.g. "Ascend910-0").
func (c *clusterd) setUsed(used map[string][]string) {
	c.used = map[string]map[string]bool{}
	for node, chips := range used {
		set := map[string]bool{}
		for _, chip := range chips {
			set[chip] = true
		}
		c.used[node] = set
	}
}

// parameterPlaneCodes are the network codes ClusterD's PreSeparate rule leaves alone
// (component/clusterd/pkg/common/constant/constants.go ParameterPlaneFaultCodes).
var parameterPlaneCodes = map[string]bool{"81078603": true, "81078607": true, "110001024": true, "110000002": true}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func withChip(list []string, chip string, in bool) []string {
	out := make([]string, 0, len(list)+1)
	for _, c := range list {
		if c != chip {
			out = append(out, c)
		}
	}
	if in {
		out = append(out, chip)
	}
	sort.Strings(out)
	return out
}

// processedDevice is a device entry as ClusterD reports it: each chip with a PreSeparateNPU fault (not a
// parameter-plane code) leaves the available list and is listed unhealthy only while no pod holds it
// (component/clusterd/pkg/application/faultmanager/cmprocess/preseparate). The stored entry is not changed.
func (c *clusterd) processedDevice(e *clusterDeviceInfo) *clusterDeviceInfo {
	node := strings.TrimPrefix(e.CmName, devicePrefix)
	out := *e
	out.DeviceList = map[string]string{}
	for k, v := range e.DeviceList {
		out.DeviceList[k] = v
	}
	for key, text := range e.DeviceList {
		if !strings.HasSuffix(key, "-Fault") {
			continue
		}
		prefix := strings.TrimSuffix(key, "-Fault")
		var faults []deviceFault
		if json.Unmarshal([]byte(text), &faults) != nil {
			continue
		}
		for _, f := range faults {
			level := f.FaultHandling
			if level == "" {
				level = f.FaultLevel
			}
			if level != "PreSeparateNPU" {
				continue
			}
			plane := false
			for _, code := range splitList(f.FaultCode) {
				if parameterPlaneCodes[code] {
					plane = true
				}
			}
			if plane {
				continue
			}
			unhealthy := prefix + "-Unhealthy"
			out.DeviceList[unhealthy] = strings.Join(
				withChip(splitList(out.DeviceList[unhealthy]), f.NPUName, !c.used[node][f.NPUName]), ",")
			if avail, ok := out.DeviceList[prefix]; ok {
				out.DeviceList[prefix] = strings.Join(withChip(splitList(avail), f.NPUName, false), ",")
			}
		}
	}
	return &out
}

// preSeparateStatus is the NodeStatus ClusterD reports for a node or switch whose most severe fault is
// pre-separate and that is not UnHealthy already: Healthy while a pod holds chips of the node, else UnHealthy
// (component/clusterd/pkg/application/faultmanager/cmprocess/preseparate).
func (c *clusterd) preSeparateStatus(node, status string) string {
	if status == "UnHealthy" {
		return status
	}
	if len(c.used[node]) > 0 {
		return "Healthy"
	}
	return "UnHealthy"
}

var nodeLevelRank = map[string]int{"NotHandleFault": 1, "PreSeparateFault": 2, "SeparateFault": 3}

// report returns the cluster-info-* ConfigMaps ClusterD would write now.
func (c *clusterd) report() []configMap {
	devices := map[string]*clusterDeviceInfo{}
	for k, e := range c.devices {
		devices[k] = c.processedDevice(e)
	}
	nodes := map[string]*clusterNodeInfo{}
	for k, e := range c.nodes {
		most := ""
		for _, d := range e.FaultDevList {
			if d != nil && nodeLevelRank[d.FaultLevel] > nodeLevelRank[most] {
				most = d.FaultLevel
			}
		}
		n := *e
		if most == "PreSeparateFault" {
			n.NodeStatus = c.preSeparateStatus(strings.TrimPrefix(k, nodePrefix), e.NodeStatus)
		}
		nodes[k] = &n
	}
	switches := map[string]*clusterSwitchInfo{}
	for k, e := range c.switches {
		sw := *e
		if e.FaultLevel == "PreSeparate" {
			sw.NodeStatus = c.preSeparateStatus(strings.TrimPrefix(k, switchPrefix), e.NodeStatus)
		}
		switches[k] = &sw
	}
	var out []configMap
	cm := func(name, value string) {
		out = append(out, ownedCM(name, c.outNS, map[string]string{volcanoLabel: "true"}, map[string]string{name: value}))
	}
	sw := chunks(switches, c.maxChunk)
	c.switchCMs = max(c.switchCMs, len(sw))
	for i := 0; i < c.switchCMs; i++ {
		value := ""
		if i < len(sw) {
			value = sw[i]
		}
		cm(clusterSwitch+strconv.Itoa(i), value)
	}
	// The node view is never split.
	if len(nodes) == 0 {
		cm(clusterNode, "")
	} else {
		cm(clusterNode, mustJSON(nodes))
	}
	dev := chunks(devices, c.maxChunk)
	c.deviceCMs = max(c.deviceCMs, len(dev))
	for i := 0; i < c.deviceCMs; i++ {
		value := ""
		if i < len(dev) {
			value = dev[i]
		}
		cm(clusterDevice+strconv.Itoa(i), value)
	}
	return out
}
