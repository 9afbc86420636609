//go:build faults

package faults

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	_ "modernc.org/sqlite" // the "sqlite" driver, to check the file after the kills

	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// writes runs concurrent tasks.Create calls against url until stop is
// closed, and records the ids of those acknowledged.
type writes struct {
	mu     sync.Mutex
	acked  []string
	failed int
	last   time.Time // when the last write was acknowledged
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writes) run(client tasksv1connect.TasksServiceClient, workers int, tag string, stop <-chan struct{}) *sync.WaitGroup {
	return loadFor(workers, 0, stop, func(worker, n int) {
		key := fmt.Sprintf("%s-%d-%d", tag, worker, n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := client.Create(withKey(ctx, key), &tasksv1.CreateRequest{Description: "commit " + key})
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.failed++
			time.Sleep(10 * time.Millisecond) // the service is down: do not spin
			return
		}
		w.acked = append(w.acked, res.GetTask().GetId())
		w.last = time.Now()
	})
}

// missing returns how many acknowledged tasks the service does not have.
func (w *writes) missing(t *testing.T, client tasksv1connect.TasksServiceClient) int {
	t.Helper()
	w.mu.Lock()
	ids := append([]string(nil), w.acked...)
	w.mu.Unlock()
	var lost sync.Map
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for id := range next {
				if _, err := client.Get(context.Background(), &tasksv1.GetRequest{TaskId: id}); err != nil {
					if connect.CodeOf(err) != connect.CodeNotFound {
						t.Errorf("get task %s: %v", id, err)
					}
					lost.Store(id, true)
				}
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	n := 0
	lost.Range(func(any, any) bool { n++; return true })
	return n
}

// A SQLite writer (the tasks service, WAL, synchronous=FULL) killed with
// SIGKILL five times in the middle of 10,000 concurrent commits, restarted
// each time on the same file: no acknowledged commit is missing, and the
// file passes PRAGMA integrity_check.
func TestSQLiteWriterKilledMidCommit(t *testing.T) {
	const commits = 10000
	svc := newServiceProc(t, "tasks", []string{"WORK_TASK_MAX_PER_DAY=1000000"})
	svc.start(t)
	client := tasksv1connect.NewTasksServiceClient(h2c(), svc.url(), bearer(svc.token(t, "writer")))
	var w writes
	stop := make(chan struct{})
	load := w.run(client, 8, "sqlite", stop)
	kills := 0
	began := time.Now()
	for _, at := range []int{1500, 3500, 5500, 7500, 9500} {
		eventually(t, 2*time.Minute, fmt.Sprintf("%d commits", at), func() bool { return w.count() >= at })
		svc.signal(t, syscall.SIGKILL)
		kills++
		svc.start(t)
	}
	eventually(t, 2*time.Minute, fmt.Sprintf("%d commits", commits), func() bool { return w.count() >= commits })
	close(stop)
	load.Wait()
	took := time.Since(began)
	// A last kill with nothing in flight, then a fresh start reads the file.
	svc.signal(t, syscall.SIGKILL)
	svc.start(t)
	lost := w.missing(t, client)
	svc.signal(t, syscall.SIGTERM)

	db, err := sql.Open("sqlite", svc.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var integrity string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil {
		t.Fatal(err)
	}
	figure(t, "commits acknowledged (kills, unacknowledged writes)", fmt.Sprintf("%d (%d, %d) in %s", w.count(), kills, w.failed, took.Round(time.Second)), ">= 10000, 5 kills", w.count() >= commits && kills == 5)
	figure(t, "acknowledged commits missing after restart", lost, "0", lost == 0)
	figure(t, "PRAGMA integrity_check", integrity, "ok", integrity == "ok")
}

// PostgreSQL (durable settings) stopped with `pg_ctl stop -m immediate`
// twice under concurrent writes through the tasks service, then started
// again: no acknowledged commit is missing, and the service writes again
// without a restart of its own.
func TestPostgresStoppedImmediatelyUnderWrites(t *testing.T) {
	const commits = 3000
	pg := pgtest.StartWith(t, pgtest.Options{Durable: true})
	svc := newServiceProc(t, "tasks", []string{"WORK_TASK_MAX_PER_DAY=1000000"}, "--dsn", pg.NewDatabase(t))
	svc.start(t)
	client := tasksv1connect.NewTasksServiceClient(h2c(), svc.url(), bearer(svc.token(t, "writer")))
	var w writes
	stop := make(chan struct{})
	load := w.run(client, 8, "pg", stop)
	var recovery []time.Duration
	for _, at := range []int{1000, 2000} {
		eventually(t, 2*time.Minute, fmt.Sprintf("%d commits", at), func() bool { return w.count() >= at })
		if err := pg.StopImmediate(); err != nil {
			t.Fatal(err)
		}
		down := time.Now()
		time.Sleep(time.Second) // writes fail while it is down
		if err := pg.Restart(); err != nil {
			t.Fatal(err)
		}
		before := w.count()
		eventually(t, time.Minute, "writes acknowledged after the restart", func() bool { return w.count() > before })
		w.mu.Lock()
		recovery = append(recovery, w.last.Sub(down))
		w.mu.Unlock()
	}
	eventually(t, 2*time.Minute, fmt.Sprintf("%d commits", commits), func() bool { return w.count() >= commits })
	close(stop)
	load.Wait()
	lost := w.missing(t, client)
	figure(t, "commits acknowledged (immediate stops, unacknowledged writes)", fmt.Sprintf("%d (2, %d)", w.count(), w.failed), ">= 3000", w.count() >= commits)
	figure(t, "acknowledged commits missing after restart", lost, "0", lost == 0)
	report(t, "seconds from stop to the next acknowledged write (1s down)", fmt.Sprintf("%.2f, %.2f", recovery[0].Seconds(), recovery[1].Seconds()), "<= 10",
		recovery[0] <= 10*time.Second && recovery[1] <= 10*time.Second)
}
