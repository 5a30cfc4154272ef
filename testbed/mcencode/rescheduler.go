package main

// What MindCluster's Volcano plugin (the rescheduler) writes, as struct definitions of our own with its field
// names, Go types and JSON tags, read from Ascend/mind-cluster at commit 22bb3d98:
//   - component/ascend-for-volcano/plugin/type.go: TaskResetInfo, TaskDevInfo (DevFaultInfo embedded, so its
//     fields are flattened), DevFaultInfo; keys reset.json and restartType (ResetInfoCMDataKey,
//     ResetInfoTypeKey); component/ascend-for-volcano/common/util/type.go: key checkCode; util.go MakeDataHash
//     (lower-case hex SHA-256 of json.Marshal of the same struct);
//   - component/ascend-for-volcano/internal/rescheduling/type.go: RemainRetryTimes, RescheduleReason
//     (AdditionalInfo `json:",omitempty"`), RescheduleRecord, RescheduleTaskReason; the values of
//     remain-retry-times and recent-reschedule-records are json.Marshal of a map keyed by the scheduler's job
//     id, and the empty string when the map is empty (cache.go).
//
// The ops only encode what they are given; the update rules (which field changes when) live in the agent and are
// tested there against these bytes.

type devFaultInfo struct {
	LogicId       int32
	Status        string
	Policy        string
	InitialPolicy string
	ErrorCode     []int64
	ErrorCodeHex  string
}

type taskDevInfo struct {
	RankId int
	devFaultInfo
}

type taskResetInfo struct {
	RankList            []*taskDevInfo
	UpdateTime          int64
	RetryTime           int
	FaultFlushing       bool
	GracefulExit        int
	RestartFaultProcess bool
}

type remainRetryTimes struct {
	UUID  string
	Times int
}

type rescheduleTaskReason struct {
	RescheduleReason string
	PodName          string
	NodeName         string
	NodeRankIndex    string
}

type rescheduleRecord struct {
	LogFileFormatTime   string
	RescheduleTimeStamp int64
	ReasonOfTask        []rescheduleTaskReason
}

type rescheduleReason struct {
	JobID                string
	TotalRescheduleTimes int
	RescheduleRecords    []rescheduleRecord
	AdditionalInfo       string `json:",omitempty"`
}

// The request decoder refuses unknown fields, nested and embedded ones included, so a field the agent misspells
// fails its test instead of being dropped. devFaultInfo's fields arrive flattened, as in reset.json.

// resetConfigData is the data of reset-config-<job> for `info`: checkCode, reset.json and, if not empty,
// restartType.
func resetConfigData(info taskResetInfo, restartType string) map[string]string {
	data := map[string]string{"checkCode": hashOf(info), "reset.json": mustJSON(info)}
	if restartType != "" {
		data["restartType"] = restartType
	}
	return data
}

func mapValue[V any](m map[string]V) string {
	if len(m) == 0 {
		return ""
	}
	return mustJSON(m)
}
