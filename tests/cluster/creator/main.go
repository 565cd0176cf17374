// Command creator creates the Jobs of a bench/e2e plan the way Kueue's scheduler performance runner creates its
// workloads (sigs.k8s.io/kueue test/performance/scheduler/runner/generator): one goroutine per workload set of
// each queue, each creating its set's objects one after the other, synchronously, at the set's interval, through
// client-go with the runner's client limits (its in-cluster make target passes --qps=1000 --burst=2000). Jobs are
// sent as protobuf, as client-go sends built-in kinds. Tooling for bench/e2e only, never part of admitd.
//
// The plan (-plan) is JSON written by bench/e2e: {"jobs": [{"group": "...", "at_s": 0.1, "job": {...}}, ...]},
// the Job bodies exactly as the Python creator sends them. -pace absolute (the default) creates each Job at
// -start + at_s, so a slow create delays the next one of its set but the schedule does not drift; -pace kueue
// waits the interval after each create returns, as the generator's `<-time.After(delay)` loop does, so the set's
// schedule drifts by the create latencies. It prints one JSON object on stdout when every Job is created: the
// count, the lag of each create behind its target (max, p50, p99), the wall time and its own CPU seconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type entry struct {
	Group string          `json:"group"`
	AtS   float64         `json:"at_s"`
	Job   json.RawMessage `json:"job"`
}

type planFile struct {
	Jobs []entry `json:"jobs"`
}

type report struct {
	Created   int     `json:"created"`
	Groups    int     `json:"groups"`
	LagMaxS   float64 `json:"lag_max_s"`
	LagP50S   float64 `json:"lag_p50_s"`
	LagP99S   float64 `json:"lag_p99_s"`
	WallS     float64 `json:"wall_s"`
	CPUS      float64 `json:"cpu_s"`
	QPS       float64 `json:"qps"`
	Burst     int     `json:"burst"`
	Pace      string  `json:"pace"`
	Protobuf  bool    `json:"protobuf"`
	FirstErr  string  `json:"first_error,omitempty"`
	ErrorsNum int     `json:"errors"`
}

type job struct {
	at  float64
	obj *batchv1.Job
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "creator: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (required)")
	planPath := flag.String("plan", "", "plan file written by bench/e2e (required)")
	qps := flag.Float64("qps", 1000, "client-go QPS (Kueue's runner: 1000)")
	burst := flag.Int("burst", 2000, "client-go burst (Kueue's runner: 2000)")
	start := flag.Float64("start", 0, "Unix time (seconds) of the plan's offset 0; 0: one second from now")
	pace := flag.String("pace", "absolute", "absolute: each Job at start + at_s; kueue: the interval after each create")
	protobuf := flag.Bool("protobuf", true, "send Jobs as protobuf (client-go's way for built-in kinds)")
	flag.Parse()
	if *kubeconfig == "" || *planPath == "" {
		fail("-kubeconfig and -plan are required")
	}
	if *pace != "absolute" && *pace != "kueue" {
		fail("-pace %q: expected absolute or kueue", *pace)
	}

	raw, err := os.ReadFile(*planPath)
	if err != nil {
		fail("reading the plan: %v", err)
	}
	var p planFile
	if err := json.Unmarshal(raw, &p); err != nil {
		fail("plan %s is not the expected JSON: %v", *planPath, err)
	}
	groups := map[string][]job{}
	var order []string
	for i, e := range p.Jobs {
		obj := &batchv1.Job{}
		if err := json.Unmarshal(e.Job, obj); err != nil {
			fail("plan %s: jobs[%d].job is not a batch/v1 Job: %v", *planPath, i, err)
		}
		if obj.Namespace == "" || obj.Name == "" {
			fail("plan %s: jobs[%d].job has no namespace or name", *planPath, i)
		}
		if e.Group == "" {
			fail("plan %s: jobs[%d] (%s/%s) has no group", *planPath, i, obj.Namespace, obj.Name)
		}
		if _, ok := groups[e.Group]; !ok {
			order = append(order, e.Group)
		}
		groups[e.Group] = append(groups[e.Group], job{at: e.AtS, obj: obj})
	}
	for _, g := range order {
		sort.SliceStable(groups[g], func(a, b int) bool { return groups[g][a].at < groups[g][b].at })
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig %s: %v", *kubeconfig, err)
	}
	cfg.QPS = float32(*qps)
	cfg.Burst = *burst
	cfg.UserAgent = "e2e-create-go"
	if *protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail("client: %v", err)
	}

	t0 := time.Now().Add(time.Second)
	if *start > 0 {
		t0 = time.Unix(0, int64(*start*1e9))
	}
	ctx := context.Background()
	var (
		mu       sync.Mutex
		lags     []float64
		errs     int
		firstErr string
		wg       sync.WaitGroup
	)
	began := time.Now()
	for _, g := range order {
		jobs := groups[g]
		wg.Go(func() {
			prev, last := 0.0, t0
			if d := time.Until(t0); d > 0 {
				time.Sleep(d)
			}
			for _, j := range jobs {
				target := t0.Add(time.Duration(j.at * 1e9))
				if *pace == "kueue" {
					// The generator: `<-time.After(delay)` after the previous create returned.
					target = last.Add(time.Duration((j.at - prev) * 1e9))
				}
				if d := time.Until(target); d > 0 {
					time.Sleep(d)
				}
				lag := time.Since(target).Seconds()
				_, err := cs.BatchV1().Jobs(j.obj.Namespace).Create(ctx, j.obj, metav1.CreateOptions{})
				last = time.Now()
				prev = j.at
				mu.Lock()
				lags = append(lags, lag)
				if err != nil {
					errs++
					if firstErr == "" {
						firstErr = fmt.Sprintf("%s/%s: %v", j.obj.Namespace, j.obj.Name, err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Float64s(lags)
	pick := func(q float64) float64 {
		if len(lags) == 0 {
			return 0
		}
		i := int(q*float64(len(lags))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		return lags[i]
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	out := report{
		Created: len(lags) - errs, Groups: len(order), LagMaxS: pick(1), LagP50S: pick(0.5), LagP99S: pick(0.99),
		WallS: time.Since(began).Seconds(), CPUS: cpu, QPS: *qps, Burst: *burst, Pace: *pace, Protobuf: *protobuf,
		FirstErr: firstErr, ErrorsNum: errs,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("writing the report: %v", err)
	}
	if errs > 0 {
		fmt.Fprintf(os.Stderr, "creator: %d of %d creates failed, first: %s\n", errs, len(lags), firstErr)
		os.Exit(1)
	}
}
