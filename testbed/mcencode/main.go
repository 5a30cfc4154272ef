package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// request is one line of `mcencode serve`'s input. Op selects the builder and which field it reads:
//
//	device          {"device": deviceReq}  -> the device plugin's mindx-dl-deviceinfo-<node> ConfigMap
//	devices         {"devices": [deviceReq]} -> a list of them in one round trip (benchmarks write thousands)
//	node            {"node": nodeReq}      -> NodeD's mindx-dl-nodeinfo-<node> ConfigMap
//	public          {"public": publicReq}  -> a public-fault ConfigMap
//	clusterd-put    {"configmap": cm}      -> ClusterD reads a per-node ConfigMap; answers whether it took it
//	clusterd-delete {"configmap": cm}      -> ClusterD forgets a deleted one (only name and namespace are read)
//	clusterd-report {"namespace": ns, "max_chunk_bytes": n} -> the cluster-info-* ConfigMaps it would write
//	clusterd-used   {"used": {node: [chip]}} -> the chips pods hold now (ClusterD's PreSeparate rules read it)
//	clusterd-reset  {}                     -> a fresh ClusterD (nothing read, no ConfigMap written yet)
//	reset-config    {"reset": taskResetInfo, "restart_type": s} -> the data of reset-config-<job>
//	remain-retry-times {"remain": {id: remainRetryTimes}}      -> the remain-retry-times value
//	reschedule-reasons {"reasons": {id: rescheduleReason}}     -> the recent-reschedule-records value
//
// The answer is {"ok": value} or {"error": "why"}; a bad request never ends the server.
type request struct {
	Op            string              `json:"op"`
	Device        *deviceReq          `json:"device"`
	Devices       []deviceReq         `json:"devices"`
	Node          *nodeReq            `json:"node"`
	Public        *publicReq          `json:"public"`
	ConfigMap     *configMap          `json:"configmap"`
	Namespace     string              `json:"namespace"`
	MaxChunkBytes int                 `json:"max_chunk_bytes"`
	Used          map[string][]string `json:"used"`

	Reset       *taskResetInfo              `json:"reset"`
	RestartType string                      `json:"restart_type"`
	Remain      map[string]remainRetryTimes `json:"remain"`
	Reasons     map[string]rescheduleReason `json:"reasons"`
}

type answer struct {
	OK    any    `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

func handle(agg **clusterd, line []byte) (any, error) {
	var r request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bad request: %v", err)
	}
	need := func(ok bool, field string) error {
		if !ok {
			return fmt.Errorf("op %s needs %q", r.Op, field)
		}
		return nil
	}
	switch r.Op {
	case "device":
		if err := need(r.Device != nil, "device"); err != nil {
			return nil, err
		}
		return deviceCMOf(*r.Device)
	case "devices":
		out := make([]configMap, 0, len(r.Devices))
		for i, d := range r.Devices {
			cm, err := deviceCMOf(d)
			if err != nil {
				return nil, fmt.Errorf("devices[%d]: %v", i, err)
			}
			out = append(out, cm)
		}
		return out, nil
	case "node":
		if err := need(r.Node != nil, "node"); err != nil {
			return nil, err
		}
		return nodeCMOf(*r.Node)
	case "public":
		if err := need(r.Public != nil, "public"); err != nil {
			return nil, err
		}
		return publicCMOf(*r.Public)
	case "clusterd-put":
		if err := need(r.ConfigMap != nil, "configmap"); err != nil {
			return nil, err
		}
		return (*agg).put(*r.ConfigMap)
	case "clusterd-delete":
		if err := need(r.ConfigMap != nil, "configmap"); err != nil {
			return nil, err
		}
		return (*agg).remove(r.ConfigMap.Metadata.Namespace, r.ConfigMap.Metadata.Name), nil
	case "clusterd-report":
		if r.Namespace != "" {
			(*agg).outNS = r.Namespace
		}
		if r.MaxChunkBytes > 0 {
			(*agg).maxChunk = r.MaxChunkBytes
		}
		return (*agg).report(), nil
	case "clusterd-used":
		(*agg).setUsed(r.Used)
		return true, nil
	case "clusterd-reset":
		*agg = newClusterd()
		return true, nil
	case "reset-config":
		if err := need(r.Reset != nil, "reset"); err != nil {
			return nil, err
		}
		return resetConfigData(*r.Reset, r.RestartType), nil
	case "remain-retry-times":
		return mapValue(r.Remain), nil
	case "reschedule-reasons":
		return mapValue(r.Reasons), nil
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

func serve(in io.Reader, out io.Writer) error {
	agg := newClusterd()
	rd := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriterSize(out, 1<<20)
	enc := json.NewEncoder(w)
	for {
		line, err := rd.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			value, herr := handle(&agg, line)
			a := answer{OK: value}
			if herr != nil {
				a = answer{Error: herr.Error()}
			} else if value == nil {
				a.OK = []any{}
			}
			if eerr := enc.Encode(a); eerr != nil {
				return eerr
			}
			if ferr := w.Flush(); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mcencode fixtures [-out DIR] [-top DIR] | mcencode serve")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "fixtures":
		fs := flag.NewFlagSet("fixtures", flag.ExitOnError)
		dir := fs.String("out", "../../tests/fixtures/mindcluster", "folder to write the fixtures into")
		top := fs.String("top", "../../tests/fixtures", "folder of the per-node fixtures (empty: do not write them)")
		_ = fs.Parse(os.Args[2:])
		if err := writeFixtures(*dir, *top); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "serve":
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "mcencode: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
