package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	deviceNS       = "kube-system"
	dlNS           = "mindx-dl"
	cimLabel       = "mx-consumer-cim"
	volcanoLabel   = "mx-consumer-volcano"
	publicLabel    = "mc-consumer-publicfault"
	devicePrefix   = "mindx-dl-deviceinfo-"
	nodePrefix     = "mindx-dl-nodeinfo-"
	switchPrefix   = "mindx-dl-switchinfo-"
	keyDevice      = "DeviceInfoCfg"
	keySwitch      = "SwitchInfoCfg"
	keyNode        = "NodeInfo"
	keyNodeTime    = "updateTime"
	keyPublic      = "PublicFault"
	keyManual      = "ManuallySeparateNPU"
	keyUpgrade     = "UpgradeFaultReason"
	keyDescription = "Description"
	defaultPrefix  = "huawei.com/Ascend910"
	description    = "written by the fault-agent testbed's device plugin stand-in"
)

// chipLevels are the device plugin's chip levels plus the healthy ones ClusterD writes back (NormalNPU,
// NormalNetwork); component/ascend-device-plugin/pkg/common/fault_code.go.
var chipLevels = map[string]bool{
	"NotHandleFault": true, "SubHealthFault": true, "RestartRequest": true, "RestartBusiness": true,
	"FreeRestartNPU": true, "RestartNPU": true, "PreSeparateNPU": true, "SeparateNPU": true,
	"ManuallySeparateNPU": true, "NormalNPU": true, "NormalNetwork": true,
}

var faultTypes = map[string]bool{"CardUnhealthy": true, "CardNetworkUnhealthy": true, "NodeUnhealthy": true, "PublicFault": true}

// switchLevels: the device plugin's switch level numbers by name, and the NodeStatus each most-severe level gives.
var switchLevels = map[string]int{"NotHandle": 0, "SubHealthFault": 1, "RestartRequest": 2, "PreSeparate": 3, "Separate": 4}
var switchStatus = []string{"Healthy", "SubHealthy", "UnHealthy", "PreSeparate", "UnHealthy"}

var nodeLevels = map[string]int{"NotHandleFault": 0, "PreSeparateFault": 1, "SeparateFault": 2}
var nodeStatus = []string{"Healthy", "PreSeparate", "UnHealthy"}

// hexCode: an event id as the device plugin writes it: as configured (8 digits) or with Go's %x, no leading
// zeros (component/ascend-device-plugin/pkg/common/fault_code.go FormatFaultCodeHex). A public-fault code is any
// 9 bytes (component/clusterd/pkg/application/publicfault/checker.go checkFaultCode).
var hexCode = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}$`)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func hashOf(v any) string {
	sum := sha256.Sum256([]byte(mustJSON(v)))
	return hex.EncodeToString(sum[:])
}

// chipName spells chip `i` as the device plugin does for resource `prefix`: huawei.com/Ascend910 -> Ascend910-3.
func chipName(prefix string, i int) string {
	return prefix[strings.LastIndex(prefix, "/")+1:] + "-" + strconv.Itoa(i)
}

func chipList(prefix string, ids []int) string {
	sort.Ints(ids)
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		names = append(names, chipName(prefix, id))
	}
	return strings.Join(names, ",")
}

// ---- requests ----

type chipFaultReq struct {
	Chip      int      `json:"chip"`
	Codes     []string `json:"codes"`
	Level     string   `json:"level"`
	FaultType string   `json:"fault_type"`
	TimeMs    *int64   `json:"time_ms"` // the fault_time to write as is (seconds for PublicFault)
	// CodeLevels: the level of single codes in fault_time_and_level_map when it differs from Level (a code the
	// plugin holds at a lower level than the element's, e.g. NotHandleFault beside a SeparateNPU code).
	CodeLevels map[string]string `json:"code_levels"`
}

type switchEventReq struct {
	Code           string `json:"code"`
	SwitchChip     uint   `json:"switch_chip"`
	Port           uint   `json:"port"`
	Level          string `json:"level"`
	TimeMs         *int64 `json:"time_ms"`
	EventType      uint   `json:"event_type"`
	PeerPortDevice uint   `json:"peer_port_device"`
	PeerPortId     uint   `json:"peer_port_id"`
	Severity       uint   `json:"severity"`
	Assertion      *uint  `json:"assertion"`
}

type switchReq struct {
	Enabled bool             `json:"enabled"`
	Events  []switchEventReq `json:"events"`
}

type deviceReq struct {
	Node             string         `json:"node"`
	Namespace        string         `json:"namespace"`
	Prefix           string         `json:"prefix"`
	Chips            int            `json:"chips"`
	UpdateTime       int64          `json:"update_time"`
	Faults           []chipFaultReq `json:"faults"`
	Recovering       []int          `json:"recovering"`
	ManuallySeparate []int          `json:"manually_separate"`
	SuperPodID       *int32         `json:"super_pod_id"`
	ServerIndex      *int32         `json:"server_index"`
	RackID           *int32         `json:"rack_id"`
	Switch           *switchReq     `json:"switch"`
	// CheckCode replaces the real hash (a torn or hand-edited ConfigMap); empty: the real one.
	CheckCode string `json:"check_code"`
}

type nodeDevReq struct {
	DeviceType string   `json:"device_type"`
	DeviceId   int64    `json:"device_id"`
	Codes      []string `json:"codes"`
	Level      string   `json:"level"`
}

type nodeReq struct {
	Node       string       `json:"node"`
	Namespace  string       `json:"namespace"`
	UpdateTime int64        `json:"update_time"`
	Devs       []nodeDevReq `json:"devs"`
	Status     string       `json:"status"`
	UTCOffsetS int          `json:"utc_offset_s"` // NodeD formats updateTime in its local zone
}

type publicReq struct {
	Name      string       `json:"name"`
	Namespace string       `json:"namespace"`
	Info      pubFaultInfo `json:"info"`
}

// ---- builders ----

func ownedCM(name, namespace string, labels map[string]string, data map[string]string) configMap {
	return configMap{
		APIVersion: "v1", Kind: "ConfigMap",
		Metadata: objectMeta{Name: name, Namespace: namespace, Labels: labels},
		Data:     data,
	}
}

func checkChip(prefix string, chips, chip int, what string) error {
	if chip < 0 || chip >= chips {
		return fmt.Errorf("%s: chip index %d is out of range 0-%d", what, chip, chips-1)
	}
	return nil
}

// deviceList builds DeviceList as the device plugin writes it: available chips, the -Unhealthy,
// -NetworkUnhealthy and -Recovering lists and -Fault, a JSON array inside a string (elements in request order).
func deviceList(r *deviceReq) (map[string]string, error) {
	bad, netBad := map[int]bool{}, map[int]bool{}
	faults := make([]deviceFault, 0, len(r.Faults))
	for i, f := range r.Faults {
		what := fmt.Sprintf("faults[%d]", i)
		if err := checkChip(r.Prefix, r.Chips, f.Chip, what); err != nil {
			return nil, err
		}
		if !chipLevels[f.Level] {
			return nil, fmt.Errorf("%s: level %q is not a chip level", what, f.Level)
		}
		if f.FaultType == "" {
			f.FaultType = "CardUnhealthy"
		}
		if !faultTypes[f.FaultType] {
			return nil, fmt.Errorf("%s: fault_type %q is not one the device plugin or ClusterD writes", what, f.FaultType)
		}
		if len(f.Codes) == 0 {
			return nil, fmt.Errorf("%s: no codes", what)
		}
		at := r.UpdateTime * 1000
		if f.FaultType == "PublicFault" {
			at = r.UpdateTime // ClusterD stamps its PublicFault elements in seconds (publicfault/fault_collector.go)
		}
		if f.TimeMs != nil {
			at = *f.TimeMs
		}
		times := make(map[string]faultTimeAndLevel, len(f.Codes))
		for _, c := range f.Codes {
			if !hexCode.MatchString(c) && len(c) != 9 {
				return nil, fmt.Errorf("%s: code %q is neither 1 to 8 hexadecimal digits nor 9 bytes", what, c)
			}
			level := f.Level
			if l, ok := f.CodeLevels[c]; ok {
				if !chipLevels[l] {
					return nil, fmt.Errorf("%s: code_levels[%s]: %q is not a chip level", what, c, l)
				}
				level = l
			}
			times[c] = faultTimeAndLevel{FaultTime: at, FaultLevel: level}
		}
		healthy := f.Level == "NormalNPU" || f.Level == "NormalNetwork"
		switch {
		case healthy:
		case f.FaultType == "CardNetworkUnhealthy":
			netBad[f.Chip] = true
		default:
			bad[f.Chip] = true
		}
		faults = append(faults, deviceFault{
			FaultType: f.FaultType, NPUName: chipName(r.Prefix, f.Chip),
			LargeModelFaultLevel: f.Level, FaultLevel: f.Level, FaultHandling: f.Level,
			FaultCode: strings.Join(f.Codes, ","), FaultTimeAndLevelMap: times,
		})
	}
	var ok, unhealthy, network, recovering []int
	for i := 0; i < r.Chips; i++ {
		if bad[i] {
			unhealthy = append(unhealthy, i)
		} else {
			ok = append(ok, i)
		}
		if netBad[i] {
			network = append(network, i)
		}
	}
	for _, c := range r.Recovering {
		if err := checkChip(r.Prefix, r.Chips, c, "recovering"); err != nil {
			return nil, err
		}
		recovering = append(recovering, c)
	}
	return map[string]string{
		r.Prefix:                       chipList(r.Prefix, ok),
		r.Prefix + "-Fault":            mustJSON(faults),
		r.Prefix + "-NetworkUnhealthy": chipList(r.Prefix, network),
		r.Prefix + "-Unhealthy":        chipList(r.Prefix, unhealthy),
		r.Prefix + "-Recovering":       chipList(r.Prefix, recovering),
	}, nil
}

// switchInfo is SwitchFaultInfo as an A3 device plugin writes it: the zero value when switch faults are off,
// else one string per event, the per-event time and level map, and the most severe level with its NodeStatus.
func switchInfo(s *switchReq, updateTime int64) (switchFaultInfo, error) {
	if !s.Enabled {
		return switchFaultInfo{}, nil
	}
	out := switchFaultInfo{
		FaultCode: []string{}, UpdateTime: updateTime, NodeStatus: switchStatus[0],
		FaultTimeAndLevelMap: map[string]faultTimeAndLevel{},
	}
	worst := -1
	for i, e := range s.Events {
		level, ok := switchLevels[e.Level]
		if !ok {
			return out, fmt.Errorf("switch.events[%d]: level %q is not a switch level", i, e.Level)
		}
		if e.Code == "" {
			return out, fmt.Errorf("switch.events[%d]: no code", i)
		}
		at := updateTime * 1000
		if e.TimeMs != nil {
			at = *e.TimeMs
		}
		assertion := uint(1)
		if e.Assertion != nil {
			assertion = *e.Assertion
		}
		ev := switchEvent{
			EventType: e.EventType, AssembledFaultCode: e.Code, PeerPortDevice: e.PeerPortDevice,
			PeerPortId: e.PeerPortId, SwitchChipId: e.SwitchChip, SwitchPortId: e.Port, Severity: e.Severity,
			Assertion: assertion, AlarmRaisedTime: at,
		}
		out.FaultCode = append(out.FaultCode, mustJSON(ev))
		key := e.Code + "_" + strconv.Itoa(int(e.SwitchChip)) + "_" + strconv.Itoa(int(e.Port))
		out.FaultTimeAndLevelMap[key] = faultTimeAndLevel{FaultTime: at, FaultLevel: e.Level}
		if level > worst {
			worst = level
			out.FaultLevel = e.Level
		}
	}
	if worst >= 0 {
		out.NodeStatus = switchStatus[worst]
	}
	return out, nil
}

func deviceCMOf(r deviceReq) (configMap, error) {
	if r.Node == "" {
		return configMap{}, fmt.Errorf("device: no node")
	}
	if r.Namespace == "" {
		r.Namespace = deviceNS
	}
	if r.Prefix == "" {
		r.Prefix = defaultPrefix
	}
	if r.Chips == 0 {
		r.Chips = 8
	}
	if r.Chips < 0 || r.Chips > 64 {
		return configMap{}, fmt.Errorf("device: chips %d is out of range 1-64", r.Chips)
	}
	dl, err := deviceList(&r)
	if err != nil {
		return configMap{}, err
	}
	info := nodeDeviceInfo{DeviceList: dl, UpdateTime: r.UpdateTime}
	cache := nodeDeviceInfoCache{DeviceInfo: info, SuperPodID: -2, ServerIndex: -2, CheckCode: hashOf(info), RackID: r.RackID}
	if r.CheckCode != "" {
		cache.CheckCode = r.CheckCode
	}
	if r.SuperPodID != nil {
		cache.SuperPodID = *r.SuperPodID
	}
	if r.ServerIndex != nil {
		cache.ServerIndex = *r.ServerIndex
	}
	manual := make([]int, 0, len(r.ManuallySeparate))
	for _, c := range r.ManuallySeparate {
		if err := checkChip(r.Prefix, r.Chips, c, "manually_separate"); err != nil {
			return configMap{}, err
		}
		manual = append(manual, c)
	}
	data := map[string]string{
		keyDevice: mustJSON(cache), keyManual: chipList(r.Prefix, manual), keyUpgrade: "{}", keyDescription: description,
	}
	if r.Switch != nil {
		sw, err := switchInfo(r.Switch, r.UpdateTime)
		if err != nil {
			return configMap{}, err
		}
		data[keySwitch] = mustJSON(sw)
	}
	return ownedCM(devicePrefix+r.Node, r.Namespace, map[string]string{cimLabel: "true"}, data), nil
}

func nodeCMOf(r nodeReq) (configMap, error) {
	if r.Node == "" {
		return configMap{}, fmt.Errorf("node: no node")
	}
	if r.Namespace == "" {
		r.Namespace = dlNS
	}
	info := nodeInfoNoName{FaultDevList: make([]*faultDev, 0, len(r.Devs))}
	worst := 0
	for i, d := range r.Devs {
		level, ok := nodeLevels[d.Level]
		if !ok {
			return configMap{}, fmt.Errorf("devs[%d]: level %q is not a NodeD level", i, d.Level)
		}
		worst = max(worst, level)
		codes := append([]string{}, d.Codes...)
		info.FaultDevList = append(info.FaultDevList, &faultDev{DeviceType: d.DeviceType, DeviceId: d.DeviceId, FaultCode: codes, FaultLevel: d.Level})
	}
	info.NodeStatus = nodeStatus[worst]
	if r.Status != "" {
		info.NodeStatus = r.Status
	}
	data := map[string]string{
		keyNode:     mustJSON(nodeInfoCM{NodeInfo: info, CheckCode: hashOf(info)}),
		keyNodeTime: time.Unix(r.UpdateTime, 0).In(time.FixedZone("", r.UTCOffsetS)).Format(time.RFC3339),
	}
	return ownedCM(nodePrefix+r.Node, r.Namespace, map[string]string{cimLabel: "true"}, data), nil
}

func publicCMOf(r publicReq) (configMap, error) {
	if r.Name == "" || r.Namespace == "" {
		return configMap{}, fmt.Errorf("public: name and namespace are required")
	}
	return ownedCM(r.Name, r.Namespace, map[string]string{publicLabel: "true"}, map[string]string{keyPublic: mustJSON(r.Info)}), nil
}
