//go:build faults

package faults

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// A service sent SIGTERM under load, as a rollout does: its gRPC health
// turns NOT_SERVING before its listener closes (for --drain), so callers
// that follow health — a load balancer, a Kubernetes readiness probe — stop
// sending before it goes, and every request sent gets its answer.
func TestSIGTERMUnderLoad(t *testing.T) {
	const drain = time.Second
	svc := newServiceProc(t, "tasks", []string{"WORK_TASK_MAX_PER_DAY=1000000"}, "--drain", drain.String())
	svc.start(t)
	client := tasksv1connect.NewTasksServiceClient(h2c(), svc.url(), bearer(svc.token(t, "writer")))

	// Health, as a load balancer watches it: NOT_SERVING stops new calls.
	conn, err := grpc.NewClient(svc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	var notServing atomic.Bool
	var notServingAt, closedAt time.Time
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			res, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: tasksv1connect.TasksServiceName})
			cancel()
			if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING && !notServing.Load() {
				notServingAt = time.Now()
				notServing.Store(true)
			}
		}
	})
	// The listener, as a new client meets it.
	watch.Go(func() {
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			c, err := net.DialTimeout("tcp", svc.addr, time.Second)
			if err != nil {
				if closedAt.IsZero() && strings.Contains(err.Error(), "refused") {
					closedAt = time.Now()
				}
				continue
			}
			c.Close()
		}
	})

	var sent, failed, afterNotServing atomic.Int64
	stop := make(chan struct{})
	load := loadFor(8, 2*time.Millisecond, stop, func(w, n int) {
		if notServing.Load() {
			return // routed elsewhere
		}
		sent.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		key := fmt.Sprintf("sigterm-%d-%d", w, n)
		if _, err := client.Create(withKey(ctx, key), &tasksv1.CreateRequest{Description: key}); err != nil {
			failed.Add(1)
			t.Logf("request failed: %v", err)
		}
		if notServing.Load() {
			afterNotServing.Add(1)
		}
	})
	time.Sleep(2 * time.Second)
	termAt := time.Now()
	svc.signal(t, syscall.SIGTERM)
	close(stop)
	load.Wait()
	close(stopWatch)
	watch.Wait()

	figure(t, "requests sent (answered after NOT_SERVING was seen)", fmt.Sprintf("%d (%d)", sent.Load(), afterNotServing.Load()), "> 0", sent.Load() > 0)
	figure(t, "failed requests", failed.Load(), "0", failed.Load() == 0)
	ok := !notServingAt.IsZero() && !closedAt.IsZero() && notServingAt.Before(closedAt)
	figure(t, "health NOT_SERVING before the listener closed", fmt.Sprintf("NOT_SERVING at +%s, closed at +%s after SIGTERM (--drain %s)",
		ms(notServingAt.Sub(termAt)), ms(closedAt.Sub(termAt)), drain), "NOT_SERVING first", ok)
}
