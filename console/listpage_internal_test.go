package console

import "testing"

// TestPagerPlacesAPage: a page's total is the list tool's, or the rows
// read when the tool gives none; the next page is where the tool says;
// the previous one is a page size back, never before the first.
func TestPagerPlacesAPage(t *testing.T) {
	next := func(n int) *int { return &n }
	cases := []struct {
		name                string
		offset, count, size int
		pg                  *pagination
		want                pager
	}{
		{"first page, no pagination", 0, 3, 25, nil, pager{Total: 3, Offset: 0, Prev: -1, Next: -1}},
		{"first of several", 0, 25, 25, &pagination{Total: 60, NextOffset: next(25)}, pager{Total: 60, Offset: 0, Prev: -1, Next: 25}},
		{"middle", 25, 25, 25, &pagination{Total: 60, NextOffset: next(50)}, pager{Total: 60, Offset: 25, Prev: 0, Next: 50}},
		{"last", 50, 10, 25, &pagination{Total: 60}, pager{Total: 60, Offset: 50, Prev: 25, Next: -1}},
		{"offset inside the first page", 10, 5, 25, &pagination{Total: 15}, pager{Total: 15, Offset: 10, Prev: 0, Next: -1}},
	}
	for _, c := range cases {
		p := pageAt(c.offset)
		p.place(c.count, c.size, c.pg)
		if p != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, p, c.want)
		}
	}
}
