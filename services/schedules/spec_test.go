package schedules_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/services/schedules"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseSpecRefusesBadSpecs(t *testing.T) {
	for _, tc := range []struct {
		cron, tz  string
		field     string
		wantInMsg string
	}{
		{"* * * *", "", "cron", "five fields"},
		{"60 * * * *", "", "cron", "out of range 0-59"},
		{"0 24 * * *", "", "cron", "out of range 0-23"},
		{"0 0 0 * *", "", "cron", "out of range 1-31"},
		{"0 0 * 13 *", "", "cron", "out of range 1-12"},
		{"0 0 * FOO *", "", "cron", "JAN-DEC"},
		{"0 0 * * 8", "", "cron", "out of range 0-7"},
		{"*/0 * * * *", "", "cron", "step"},
		{"5-1 * * * *", "", "cron", "backwards"},
		{"0 0 1 * MON", "", "cron", "not both"},
		{"@every 5m", "", "cron", "unknown macro"},
		{"0 0 30 2 *", "", "cron", "never runs"},
		{"0 0 * * *", "Mars/Olympus_Mons", "timezone", "unknown time zone"},
		{"0 0 * * *", "Local", "timezone", "unknown time zone"},
	} {
		_, err := schedules.ParseSpec(tc.cron, 0, tc.tz)
		var se *schedules.SpecError
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Message, tc.wantInMsg) {
			t.Errorf("ParseSpec(%q, %q) = %v, want a %s error saying %q", tc.cron, tc.tz, err, tc.field, tc.wantInMsg)
		}
	}
}

func TestNextRunTimes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cron     string
		interval int32
		tz       string
		after    string
		want     []string
	}{
		{"every 15 minutes", "*/15 * * * *", 0, "", "2026-03-02T10:07:00Z",
			[]string{"2026-03-02T10:15:00Z", "2026-03-02T10:30:00Z", "2026-03-02T10:45:00Z"}},
		{"a time exactly due is not next", "0 * * * *", 0, "", "2026-03-02T10:00:00Z",
			[]string{"2026-03-02T11:00:00Z", "2026-03-02T12:00:00Z"}},
		{"weekdays at 9 in Paris", "0 9 * * MON-FRI", 0, "Europe/Paris", "2026-03-06T09:00:00+01:00",
			[]string{"2026-03-09T08:00:00Z", "2026-03-10T08:00:00Z"}},
		{"names, lists and Sunday as 7", "30 6 * JAN,mar sun,7", 0, "", "2026-02-27T00:00:00Z",
			[]string{"2026-03-01T06:30:00Z", "2026-03-08T06:30:00Z"}},
		{"daily macro", "@daily", 0, "", "2026-03-02T10:07:00Z",
			[]string{"2026-03-03T00:00:00Z", "2026-03-04T00:00:00Z"}},
		{"leap day", "0 0 29 2 *", 0, "", "2026-03-02T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"a time skipped by DST does not run", "30 2 * * *", 0, "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{"a time repeated by DST runs twice", "30 1 * * *", 0, "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"}},
		{"interval aligned to the epoch", "", 300, "", "2026-03-02T10:07:30Z",
			[]string{"2026-03-02T10:10:00Z", "2026-03-02T10:15:00Z"}},
		{"interval ignores the time zone", "", 3600, "Asia/Kolkata", "2026-03-02T10:00:00Z",
			[]string{"2026-03-02T11:00:00Z", "2026-03-02T12:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := schedules.ParseSpec(tc.cron, tc.interval, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range spec.Next(mustTime(t, tc.after), len(tc.want)) {
				got = append(got, r.Format(time.RFC3339))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Next (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMinGap(t *testing.T) {
	from := mustTime(t, "2026-03-02T10:07:00Z")
	for _, tc := range []struct {
		cron     string
		interval int32
		want     time.Duration
	}{
		{"*/5 * * * *", 0, 5 * time.Minute},
		{"0,1 * * * *", 0, time.Minute},
		{"0,55 * * * *", 0, 5 * time.Minute}, // 00:55 -> 01:00
		{"0 * * * *", 0, time.Hour},
		{"0 9 * * MON", 0, 7 * 24 * time.Hour},
		{"", 900, 15 * time.Minute},
	} {
		spec, err := schedules.ParseSpec(tc.cron, tc.interval, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.MinGap(from, 0); got != tc.want {
			t.Errorf("MinGap(%q/%d) = %s, want %s", tc.cron, tc.interval, got, tc.want)
		}
	}
	// Looking stops at the first gap under the floor.
	spec, _ := schedules.ParseSpec("* * * * *", 0, "")
	if got := spec.MinGap(from, 5*time.Minute); got != time.Minute {
		t.Errorf("MinGap of every minute = %s, want 1m", got)
	}
}

func TestWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Minute:              "5 minutes",
		time.Hour + 30*time.Minute:   "1 hour 30 minutes",
		24 * time.Hour:               "1 day",
		90 * time.Second:             "1 minute 30 seconds",
		2*24*time.Hour + time.Second: "2 days 1 second",
	} {
		if got := schedules.Words(d); got != want {
			t.Errorf("Words(%s) = %q, want %q", d, got, want)
		}
	}
}
