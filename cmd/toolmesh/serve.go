package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/taskstore"
)

// domain is one service the binary can run.
type domain struct {
	// port is the default port under `toolmesh up`.
	port int
	// build opens the domain's store on db and returns its service.
	build func(ctx context.Context, db *sqldb.DB, getenv func(string) string, log *slog.Logger) (server.Service, error)
}

var domains = map[string]domain{
	"tasks": {port: 7101, build: buildTasks},
	"audit": {port: 7108, build: buildAudit},
}

func domainNames() string {
	names := make([]string, 0, len(domains))
	for n := range domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func buildTasks(ctx context.Context, db *sqldb.DB, getenv func(string) string, _ *slog.Logger) (server.Service, error) {
	st, err := taskstore.Open(ctx, db)
	if err != nil {
		return server.Service{}, err
	}
	maxPerDay := tasks.DefaultMaxPerDay
	if v := getenv("WORK_TASK_MAX_PER_DAY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return server.Service{}, fmt.Errorf("WORK_TASK_MAX_PER_DAY must be a positive integer, got %q", v)
		}
		maxPerDay = n
	}
	return tasks.New(st, tasks.Config{MaxPerDay: maxPerDay}).Registration(), nil
}

func buildAudit(ctx context.Context, db *sqldb.DB, getenv func(string) string, log *slog.Logger) (server.Service, error) {
	st, err := auditstore.Open(ctx, db)
	if err != nil {
		return server.Service{}, err
	}
	// Mesh subjects allowed to append; the edge's own subject by default.
	var appenders []string
	for _, s := range strings.Split(getenv("TOOLMESH_AUDIT_APPENDERS"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			appenders = append(appenders, s)
		}
	}
	return audit.New(st, audit.Config{Appenders: appenders, Log: log}).Registration(), nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("serve needs a domain: %s", domainNames())
	}
	name := args[0]
	d, ok := domains[name]
	if !ok {
		return fmt.Errorf("unknown domain %q (domains: %s)", name, domainNames())
	}
	fs := flag.NewFlagSet("serve "+name, flag.ContinueOnError)
	addr := fs.String("addr", fmt.Sprintf("127.0.0.1:%d", d.port), "listen address")
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory for SQLite files")
	dsn := fs.String("dsn", getenv("TOOLMESH_"+strings.ToUpper(name)+"_DSN"), "database DSN: a postgres:// URL, or a SQLite path (default <data>/"+name+".db)")
	drain := fs.Duration("drain", 0, "how long to report NOT_SERVING before closing on shutdown")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dsn == "" {
		*dsn = filepath.Join(*dataDir, name+".db")
	}
	log = log.With("service", name)
	db, err := sqldb.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	svc, err := d.build(ctx, db, getenv, log)
	if err != nil {
		return err
	}
	lis, err := server.Listen(*addr)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, lis, log, server.Options{DrainDelay: *drain, ShutdownTimeout: 10 * time.Second}, svc)
	if err != nil {
		lis.Close()
		return err
	}
	return srv.Run(ctx)
}
