package schedules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones do not depend on the host's zoneinfo
)

// Spec is when a schedule runs: a cron expression read in a time zone, or a
// fixed interval. It is parsed here, not by Temporal, and handed to Temporal
// as structured calendar ranges, so what a preview shows and what the
// Temporal Schedule does come from one parse.
type Spec struct {
	// Cron is the expression as given (a macro such as @daily stays as is).
	Cron string
	// Interval is the time between runs of an interval schedule.
	Interval time.Duration
	// Location is the time zone the cron expression is read in.
	Location *time.Location

	cal *calendar
}

// calendar is a parsed five-field cron expression. Temporal matches a time
// when every field matches (day of month AND day of week), so a cron that
// restricts both is refused rather than read differently from classic cron.
type calendar struct {
	minute [60]bool
	hour   [24]bool
	dom    [32]bool // 1..31
	month  [13]bool // 1..12
	dow    [7]bool  // 0..6, Sunday is 0
}

// Field names of a cron expression, for messages.
var cronFields = [5]string{"minute", "hour", "day of month", "month", "day of week"}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
var dayNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// searchHorizon bounds how far ahead run times are looked for: a cron that
// does not run within it (say, February 30th) is refused as never running.
// Eight years cover every leap-day pattern.
const searchHorizon = 8 * 366 * 24 * time.Hour

// SpecError says what is wrong with a spec and which request field holds it.
type SpecError struct {
	Field   string
	Rule    string
	Message string
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Message }

// ParseSpec reads a schedule spec: exactly one of cron and intervalSeconds
// (the request rules enforce that), and an IANA time zone ("" is UTC).
func ParseSpec(cron string, intervalSeconds int32, timezone string) (Spec, error) {
	loc := time.UTC
	if timezone != "" {
		l, err := time.LoadLocation(timezone)
		// "Local" would mean this process's zone, not one Temporal knows.
		if err != nil || timezone == "Local" {
			return Spec{}, &SpecError{Field: "timezone", Rule: "schedules.timezone",
				Message: fmt.Sprintf("unknown time zone %q: use an IANA name such as \"Europe/Paris\" or \"UTC\"", timezone)}
		}
		loc = l
	}
	if intervalSeconds > 0 {
		return Spec{Interval: time.Duration(intervalSeconds) * time.Second, Location: loc}, nil
	}
	cal, err := parseCron(cron)
	if err != nil {
		return Spec{}, &SpecError{Field: "cron", Rule: "schedules.cron", Message: err.Error()}
	}
	s := Spec{Cron: strings.Join(strings.Fields(cron), " "), Location: loc, cal: cal}
	if len(s.Next(time.Now(), 1)) == 0 {
		return Spec{}, &SpecError{Field: "cron", Rule: "schedules.cron", Message: fmt.Sprintf("%q never runs (no matching time in the next eight years)", cron)}
	}
	return s, nil
}

func parseCron(expr string) (*calendar, error) {
	expr = strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(expr)]; ok {
		expr = m
	} else if strings.HasPrefix(expr, "@") {
		return nil, fmt.Errorf("unknown macro %q: use @hourly, @daily, @weekly, @monthly or @yearly, or five fields", expr)
	}
	fields := strings.Fields(expr)
	if len(fields) != 5 {
		return nil, fmt.Errorf("want five fields (minute hour day-of-month month day-of-week), got %d", len(fields))
	}
	c := &calendar{}
	var dow [8]bool
	sets := []struct {
		dst      []bool
		min, max int
		names    []string
		nameBase int
	}{
		{c.minute[:], 0, 59, nil, 0},
		{c.hour[:], 0, 23, nil, 0},
		{c.dom[:], 1, 31, nil, 0},
		{c.month[:], 1, 12, monthNames, 1},
		{dow[:], 0, 7, dayNames, 0},
	}
	for i, f := range fields {
		s := sets[i]
		if err := parseField(f, s.dst, s.min, s.max, s.names, s.nameBase); err != nil {
			return nil, fmt.Errorf("%s field %q: %w", cronFields[i], f, err)
		}
	}
	copy(c.dow[:], dow[:7])
	if dow[7] {
		c.dow[0] = true // 7 is Sunday too
	}
	if restricted(c.dom[1:]) && restricted(c.dow[:]) {
		return nil, fmt.Errorf("restrict day of month or day of week, not both (Temporal requires both to match, unlike classic cron)")
	}
	return c, nil
}

func restricted(set []bool) bool { return slices.Contains(set, false) }

// parseField fills set (indexed by value) from one cron field.
func parseField(f string, set []bool, lo, hi int, names []string, nameBase int) error {
	for _, item := range strings.Split(f, ",") {
		if item == "" {
			return fmt.Errorf("empty list item")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > hi {
				return fmt.Errorf("step %q must be a number from 1 to %d", stepText, hi)
			}
			step = n
		}
		start, end := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if start, err = value(a, lo, hi, names, nameBase); err != nil {
				return err
			}
			if end, err = value(b, lo, hi, names, nameBase); err != nil {
				return err
			}
			if start > end {
				return fmt.Errorf("range %s runs backwards", rng)
			}
		default:
			v, err := value(rng, lo, hi, names, nameBase)
			if err != nil {
				return err
			}
			start = v
			if !hasStep {
				end = v
			}
		}
		for v := start; v <= end; v += step {
			set[v] = true
		}
	}
	return nil
}

func value(s string, lo, hi int, names []string, nameBase int) (int, error) {
	if i := slices.Index(names, strings.ToUpper(s)); i >= 0 {
		return i + nameBase, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if names != nil {
			return 0, fmt.Errorf("%q is not a number from %d to %d or a name (%s-%s)", s, lo, hi, names[0], names[len(names)-1])
		}
		return 0, fmt.Errorf("%q is not a number from %d to %d", s, lo, hi)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
	}
	return n, nil
}

// Next returns the first n run times strictly after after, earliest first.
// Cron times follow Temporal's reading of wall-clock time: a time that a
// daylight-saving change skips does not run, one that it repeats runs
// twice.
func (s Spec) Next(after time.Time, n int) []time.Time {
	if n <= 0 {
		return nil
	}
	out := make([]time.Time, 0, n)
	if s.cal == nil {
		every := s.Interval
		if every <= 0 {
			return nil
		}
		// Runs are at the epoch plus whole intervals (Temporal's interval
		// spec with no offset).
		t := after.Truncate(time.Second)
		next := time.Unix(0, 0).Add((time.Duration(t.Unix())*time.Second/every + 1) * every)
		for len(out) < n {
			out = append(out, next.UTC())
			next = next.Add(every)
		}
		return out
	}
	loc := s.Location
	local := after.In(loc)
	day := time.Date(local.Year(), local.Month(), local.Day(), 12, 0, 0, 0, loc)
	limit := after.Add(searchHorizon)
	for ; len(out) < n && day.Before(limit); day = day.AddDate(0, 0, 1) {
		y, m, d := day.Date()
		if !s.cal.month[m] || !s.cal.dom[d] || !s.cal.dow[day.Weekday()] {
			continue
		}
		var today []time.Time
		for h := 0; h < 24; h++ {
			if !s.cal.hour[h] {
				continue
			}
			for mi := 0; mi < 60; mi++ {
				if s.cal.minute[mi] {
					today = append(today, wallInstants(y, m, d, h, mi, loc)...)
				}
			}
		}
		slices.SortFunc(today, func(a, b time.Time) int { return a.Compare(b) })
		for _, t := range today {
			if t.After(after) && len(out) < n {
				out = append(out, t.UTC())
			}
		}
	}
	return out
}

// wallInstants returns the instants whose wall-clock time in loc is the given
// one: none in a daylight-saving gap, two in a repeated hour.
func wallInstants(y int, m time.Month, d, h, mi int, loc *time.Location) []time.Time {
	t := time.Date(y, m, d, h, mi, 0, 0, loc)
	var out []time.Time
	for _, shift := range []time.Duration{-time.Hour, -30 * time.Minute, 0, 30 * time.Minute, time.Hour} {
		c := t.Add(shift).In(loc)
		cy, cm, cd := c.Date()
		if cy == y && cm == m && cd == d && c.Hour() == h && c.Minute() == mi && c.Second() == 0 &&
			!slices.ContainsFunc(out, c.Equal) {
			out = append(out, c)
		}
	}
	return out
}

// maxGapSamples bounds how many consecutive runs MinGap compares.
const maxGapSamples = 5000

// MinGap returns the shortest time between two consecutive runs from
// from on, looking at up to a few thousand runs and stopping early once a
// gap shorter than floor is found. A spec with fewer than two runs in its
// search horizon has no gap and reports the horizon.
func (s Spec) MinGap(from time.Time, floor time.Duration) time.Duration {
	if s.cal == nil {
		return s.Interval
	}
	gap := searchHorizon
	prev := time.Time{}
	after := from
	for samples := 0; samples < maxGapSamples; {
		batch := s.Next(after, 500)
		if len(batch) == 0 {
			break
		}
		for _, t := range batch {
			if !prev.IsZero() {
				gap = min(gap, t.Sub(prev))
				if gap < floor {
					return gap
				}
			}
			prev = t
			samples++
		}
		after = batch[len(batch)-1]
	}
	return gap
}

// Summary describes the spec in words.
func (s Spec) Summary() string {
	if s.cal == nil {
		return "every " + Words(s.Interval)
	}
	return fmt.Sprintf("cron %s in %s", s.Cron, s.Location)
}

// Words says a duration the way people do: "5 minutes", "1 hour 30 minutes".
func Words(d time.Duration) string {
	if d <= 0 {
		return "0 seconds"
	}
	units := []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}}
	var parts []string
	for _, u := range units {
		if n := d / u.d; n > 0 {
			name := u.name
			if n > 1 {
				name += "s"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, name))
			d -= n * u.d
		}
	}
	if len(parts) == 0 {
		return d.String()
	}
	return strings.Join(parts, " ")
}
