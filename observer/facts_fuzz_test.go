package observer

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// FuzzApplyFacts feeds the records of a group's state topic, key and
// value as any writer (or a corrupted log) could leave them, to a shard's
// store. A record either applies or fails with an error wrapping
// errBadFact that names its key; it never panics, and a failed record
// leaves the store as it was (its batch's transaction rolls back).
func FuzzApplyFacts(f *testing.F) {
	const ch = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/2"
	for _, seed := range []struct{ key, value string }{
		{"m|s1", `{"url":"http://s1","at":1}`},
		{"m|s1", ""},
		{"c|" + ch, `{"name":"orders","start":0,"next":10,"pruned":0,"tail_off":-1}`},
		{"r|" + ch + "|3", `{"FirstStamped":4}`},
		{"h|" + ch + "|0", `{"holes":[[1,2,0],[5,9,2]]}`},
		{"f|" + ch, `{"parts":"AAE="}`},
		{"p|" + ch + "|sequence-gap|x", `{"code":"sequence-gap","n":1,"hw":3,"first":2,"claimed":"","why":""}`},
		{"F|sequence-gap|x", `{"code":"sequence-gap","severity":2,"topic":"orders","coords":"","summary":"s","count":1,"first":1,"last":2,"anchor":"` + ch + `","epoch":1,"hw":3,"history":[{"at":1,"what":"opened"}]}`},
		{"A|sequence-gap|x", `{"by":"me","reason":"known","at":5,"epoch":1}`},
		{"c|not-a-channel", `{}`},
		{"r|" + ch + "|x", `{}`},
		{"F|k", `[`},
		{"z|future kind", `anything`},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	ctx := context.Background()
	st, err := OpenStore(ctx, filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		fa := fact{key: key, value: value, owner: "s2"}
		if len(value) == 0 {
			fa.value = nil
		}
		count := func() (n int64) {
			if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM facts`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := count()
		err = st.applyFacts(ctx, []fact{fa})
		if err == nil {
			return
		}
		if !errors.Is(err, errBadFact) {
			t.Fatalf("record %q = %q: error %v does not wrap errBadFact", key, value, err)
		}
		if after := count(); after != before {
			t.Fatalf("record %q failed (%v) but the store's facts went from %d to %d", key, err, before, after)
		}
	})
}
