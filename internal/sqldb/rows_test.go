package sqldb_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
)

type item struct {
	ID         int
	Name, Kind string
}

func scanItem(r sqldb.Scanner) (item, error) {
	var it item
	err := r.Scan(&it.ID, &it.Name, &it.Kind)
	return it, err
}

// items opens a fresh database of e holding items 1 to 6: the odd ones of
// kind "odd", the even ones "even".
func items(t *testing.T, e sqldbtest.Engine) *sqldb.DB {
	t.Helper()
	db := e.Open(t)
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= 6; id++ {
		kind := map[bool]string{true: "even", false: "odd"}[id%2 == 0]
		if _, err := db.ExecContext(t.Context(), db.Rebind(`INSERT INTO items (id, name, kind) VALUES (?, ?, ?)`), id, fmt.Sprintf("item %d", id), kind); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func idsOf(list []item) []int {
	out := make([]int, len(list))
	for i, it := range list {
		out[i] = it.ID
	}
	return out
}

func TestPage(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := items(t, e)
		all := sqldb.ListQuery{What: "items", Columns: `id, name, kind`, From: `items`, OrderBy: `id DESC`}
		odd := all
		odd.And(`kind = ?`, "odd")
		oddBelow5 := odd
		oddBelow5.And(`id < ?`, 5)
		for _, tc := range []struct {
			name          string
			q             sqldb.ListQuery
			offset, limit int
			want          []int
			total         int
		}{
			{"every row", all, 0, 50, []int{6, 5, 4, 3, 2, 1}, 6},
			{"first page", all, 0, 2, []int{6, 5}, 6},
			{"middle page", all, 2, 2, []int{4, 3}, 6},
			{"last, short page", all, 5, 2, []int{1}, 6},
			{"past the end", all, 6, 2, []int{}, 6},
			{"one condition", odd, 1, 50, []int{3, 1}, 3},
			{"two conditions", oddBelow5, 0, 50, []int{3, 1}, 2},
		} {
			got, total, err := sqldb.Page(t.Context(), db, tc.q, tc.offset, tc.limit, scanItem)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if diff := cmp.Diff(tc.want, idsOf(got)); diff != "" || total != tc.total {
				t.Errorf("%s: total %d (want %d), ids (-want +got):\n%s", tc.name, total, tc.total, diff)
			}
		}
	})
}

func TestPageErrorsNameTheRows(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := items(t, e)
		_, _, err := sqldb.Page(t.Context(), db, sqldb.ListQuery{What: "widgets", Columns: `id, name, kind`, From: `nowhere`, OrderBy: `id`}, 0, 10,
			scanItem)
		if err == nil || !strings.HasPrefix(err.Error(), "count widgets: ") {
			t.Errorf("Page of a missing table: err = %v, want count widgets: ...", err)
		}
		_, _, err = sqldb.Page(t.Context(), db, sqldb.ListQuery{What: "widgets", Columns: `id, name, nonsense`, From: `items`, OrderBy: `id`}, 0, 10,
			scanItem)
		if err == nil || !strings.HasPrefix(err.Error(), "list widgets: ") {
			t.Errorf("Page of a missing column: err = %v, want list widgets: ...", err)
		}
		// The scan function's error comes back as it is.
		boom := errors.New("boom")
		_, _, err = sqldb.Page(t.Context(), db, sqldb.ListQuery{What: "items", Columns: `id, name, kind`, From: `items`, OrderBy: `id`}, 0, 10,
			func(sqldb.Scanner) (item, error) { return item{}, boom })
		if err != boom {
			t.Errorf("Page with a failing scan: err = %v, want %v", err, boom)
		}
	})
}

func TestAll(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := items(t, e)
		got, err := sqldb.All(t.Context(), db, "list even items", scanItem, `SELECT id, name, kind FROM items WHERE kind = ? ORDER BY id`, "even")
		if err != nil {
			t.Fatal(err)
		}
		want := []item{{2, "item 2", "even"}, {4, "item 4", "even"}, {6, "item 6", "even"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("All (-want +got):\n%s", diff)
		}
		got, err = sqldb.All(t.Context(), db, "list no items", scanItem, `SELECT id, name, kind FROM items WHERE kind = ?`, "none")
		if err != nil || got != nil {
			t.Errorf("All of no rows = %v, %v; want nil, nil", got, err)
		}
		_, err = sqldb.All(t.Context(), db, "list widgets", scanItem, `SELECT id FROM nowhere`)
		if err == nil || !strings.HasPrefix(err.Error(), "list widgets: ") {
			t.Errorf("All of a missing table: err = %v, want list widgets: ...", err)
		}
	})
}

func TestOne(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := items(t, e)
		notFound := errors.New("no such item")
		byID := func(id int) *sql.Row {
			return db.QueryRowContext(t.Context(), db.Rebind(`SELECT id, name, kind FROM items WHERE id = ?`), id)
		}
		got, err := sqldb.One(byID(3), scanItem, notFound)
		if err != nil || got != (item{3, "item 3", "odd"}) {
			t.Errorf("One(item 3) = %v, %v", got, err)
		}
		if _, err := sqldb.One(byID(7), scanItem, notFound); err != notFound {
			t.Errorf("One(item 7) err = %v, want %v", err, notFound)
		}
		boom := errors.New("boom")
		if _, err := sqldb.One(byID(3), func(sqldb.Scanner) (item, error) { return item{}, boom }, notFound); err != boom {
			t.Errorf("One with a failing scan: err = %v, want %v", err, boom)
		}
	})
}

func TestMigrateStore(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := e.Open(t)
		files := fstest.MapFS{}
		for name, body := range map[string]string{
			"0001_things.sql": `CREATE TABLE things (id INTEGER PRIMARY KEY);`,
			"0002_seed.sql":   `INSERT INTO things (id) VALUES (1);`,
		} {
			for _, d := range []sqldb.Dialect{sqldb.SQLite, sqldb.Postgres} {
				files["migrations/"+string(d)+"/"+name] = &fstest.MapFile{Data: []byte(body)}
			}
		}
		for range 2 {
			if err := db.MigrateStore(t.Context(), "things", files); err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM things`); n != 1 {
			t.Errorf("things has %d rows, want 1", n)
		}
		files["migrations/"+string(db.Dialect)+"/0003_broken.sql"] = &fstest.MapFile{Data: []byte(`INSERT INTO nowhere VALUES (1);`)}
		err := db.MigrateStore(t.Context(), "things", files)
		if err == nil || !strings.HasPrefix(err.Error(), "migrate things store: apply migration 0003_broken.sql: ") {
			t.Errorf("MigrateStore with a broken migration: err = %v, want migrate things store: apply migration 0003_broken.sql: ...", err)
		}
	})
}
