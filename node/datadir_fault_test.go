package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tckclk/tckclk/node/api/wire"
	"github.com/tckclk/tckclk/node/consensus"
	"github.com/tckclk/tckclk/node/datadir"
)

// faultTemplate builds a data dir with acknowledged grants before and after
// a snapshot: old is a copy taken after the first grants (a stale backup),
// full the dir after all of them, want every ticket as the node served it.
type faultTemplate struct {
	old, full string
	want      map[string]wire.Ticket
}

func buildFaultTemplate(t *testing.T, store string) faultTemplate {
	t.Helper()
	root := t.TempDir()
	ft := faultTemplate{old: filepath.Join(root, "old"), full: filepath.Join(root, "full"), want: map[string]wire.Ticket{}}
	work := filepath.Join(root, "work")
	cfg := testConfig(t, work)
	cfg.Cluster.Raft.LogStore = store
	cfg.Cluster.Raft.TrailingLogs = 2 // after a snapshot the log holds little: its loss must be seen
	var n *server
	tn := startNodeHooks(t, cfg, Deps{Env: noEnv}, testHooks{built: func(x *server) { n = x }})
	for i := range 5 {
		if _, err := tn.c.Grant(bg, "pre-"+string(rune('a'+i)), "h", 250); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.cons.Load().Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, work, ft.old)
	tn = startNode(t, cfg, Deps{Env: noEnv})
	for i := range 20 {
		if _, err := tn.c.Grant(bg, "post-"+string(rune('a'+i)), "h", 250); err != nil {
			t.Fatal(err)
		}
	}
	list, err := tn.c.List(bg, "", 0)
	if err != nil || len(list.Tickets) != 25 {
		t.Fatalf("list %v %v", list, err)
	}
	for _, tk := range list.Tickets {
		ft.want[tk.Name] = tk
	}
	if err := tn.stop(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, work, ft.full)
	return ft
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newestSnapshotDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, datadir.SnapshotsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no snapshot in the template")
	}
	return filepath.Join(dir, datadir.SnapshotsDir, names[len(names)-1])
}

func truncateTo(size func(int64) int64) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size(fi.Size())); err != nil {
			t.Fatal(err)
		}
	}
}

func flipAt(at func(int64) int64) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at(int64(len(b)))] ^= 0x10
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// tailSegment is the newest WAL segment file of a data dir.
func tailSegment(t *testing.T, d string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(d, datadir.WALDir, "*.wal"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no WAL segment in %s (%v)", d, err)
	}
	return m[len(m)-1] // zero-padded names: the newest last
}

// Issue 10: every damage of the data dir that could make the node forget an
// acknowledged write or issue a fencing token twice refuses the start,
// naming the file; damage that cannot starts with every acknowledged ticket
// (holder, token, expiry) intact. No case panics. Once per log store: the
// write-ahead log (a new dir's default) and bolt.
func TestDataDirFaultTable(t *testing.T) {
	for _, store := range []string{consensus.LogStoreWAL, consensus.LogStoreBolt} {
		t.Run(store, func(t *testing.T) { dataDirFaultTable(t, store) })
	}
}

func dataDirFaultTable(t *testing.T, store string) {
	ft := buildFaultTemplate(t, store)
	db := func(d string) string { return filepath.Join(d, datadir.RaftDBFile) }
	walDir := func(d string) string { return filepath.Join(d, datadir.WALDir) }
	walMeta := func(d string) string { return filepath.Join(d, datadir.WALDir, "wal-meta.db") }
	seg := func(d string) string { return tailSegment(t, d) }
	state := func(d string) string { return filepath.Join(newestSnapshotDir(t, d), "state.bin") }
	meta := func(d string) string { return filepath.Join(newestSnapshotDir(t, d), "meta.json") }
	hwm := func(d string) string { return filepath.Join(d, datadir.HighWaterFile) }
	remove := func(t *testing.T, p string) {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	replaceWithOld := func(t *testing.T, p string) {
		dir := p // the damaged copy is …/data: the same path under ft.old
		for filepath.Base(dir) != "data" {
			dir = filepath.Dir(dir)
		}
		rel, _ := filepath.Rel(dir, p)
		old := filepath.Join(ft.old, rel)
		if fi, err := os.Stat(old); err == nil && fi.IsDir() {
			remove(t, p)
			copyDir(t, old, p)
			return
		}
		b, err := os.ReadFile(old)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const (
		refused = "refused"
		intact  = "intact"
		either  = "refused or intact"
	)
	type faultCase struct {
		name   string
		file   func(string) string
		damage func(*testing.T, string)
		want   string
	}
	boltCases := []faultCase{
		{"raft.db deleted", db, remove, refused},
		{"raft.db emptied", db, truncateTo(func(int64) int64 { return 0 }), refused},
		{"raft.db truncated to 4 KiB", db, truncateTo(func(int64) int64 { return 4096 }), refused},
		{"raft.db truncated to 16 KiB", db, truncateTo(func(int64) int64 { return 16384 }), refused},
		{"raft.db truncated to half", db, truncateTo(func(n int64) int64 { return n / 2 }), either}, // bolt preallocates: the tail may be unused
		{"raft.db truncated by one byte", db, truncateTo(func(n int64) int64 { return n - 1 }), either},
		{"raft.db replaced by the older copy", db, replaceWithOld, refused},
		{"raft.db bit flipped in the meta page", db, flipAt(func(int64) int64 { return 40 }), either},
		{"raft.db bit flipped in the middle", db, flipAt(func(n int64) int64 { return n / 2 }), either},
		{"raft.db bit flipped near the end", db, flipAt(func(n int64) int64 { return n - 100 }), either},
	}
	walCases := []faultCase{
		{"wal/ deleted", walDir, remove, refused},
		{"wal/ replaced by the older copy", walDir, replaceWithOld, refused},
		{"wal-meta.db deleted", walMeta, remove, refused},
		{"wal-meta.db emptied", walMeta, truncateTo(func(int64) int64 { return 0 }), refused},
		{"wal-meta.db truncated to 4 KiB", walMeta, truncateTo(func(int64) int64 { return 4096 }), refused},
		{"wal-meta.db replaced by the older copy", walMeta, replaceWithOld, refused},
		{"wal-meta.db bit flipped in the meta page", walMeta, flipAt(func(int64) int64 { return 40 }), either},
		{"wal-meta.db bit flipped in the middle", walMeta, flipAt(func(n int64) int64 { return n / 2 }), either},
		{"WAL segment deleted", seg, remove, refused},
		{"WAL segment emptied", seg, truncateTo(func(int64) int64 { return 0 }), refused},
		{"WAL segment truncated to 4 KiB", seg, truncateTo(func(int64) int64 { return 4096 }), refused},
		{"WAL segment truncated by one byte", seg, truncateTo(func(n int64) int64 { return n - 1 }), refused},
		{"WAL segment replaced by the older copy", seg, replaceWithOld, refused},
		{"WAL segment bit flipped in its header", seg, flipAt(func(int64) int64 { return 3 }), refused},
		{"WAL segment bit flipped in its first records", seg, flipAt(func(int64) int64 { return 200 }), either}, // compacted entries: never read again
		{"WAL segment bit flipped in a live entry", seg, func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, []byte("post-s")) // a grant after the snapshot
			if i < 0 {
				t.Fatal("no entry of post-s in the segment")
			}
			b[i+5] ^= 0x01
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, refused},
		{"WAL segment bit flipped in its unused end", seg, flipAt(func(n int64) int64 { return n - 100 }), intact},
	}
	cases := []faultCase{
		{"snapshot state deleted", state, remove, refused},
		{"snapshot state emptied", state, truncateTo(func(int64) int64 { return 0 }), refused},
		{"snapshot state truncated", state, truncateTo(func(n int64) int64 { return n / 2 }), refused},
		{"snapshot state bit flipped", state, flipAt(func(n int64) int64 { return n / 2 }), refused},
		{"snapshot meta deleted", meta, remove, refused},
		{"snapshot meta bit flipped", meta, flipAt(func(int64) int64 { return 2 }), either}, // may still be valid JSON
		{"snapshot meta not JSON", meta, func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, refused},
		{"snapshots directory deleted", func(d string) string { return filepath.Join(d, datadir.SnapshotsDir) }, remove, refused},
		{"high-water mark deleted", hwm, remove, intact},
		{"high-water mark garbled", hwm, func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("last_index: x\nterm: 9\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, refused},
		{"LOCK deleted", func(d string) string { return filepath.Join(d, datadir.LockFile) }, remove, intact},
	}
	if store == consensus.LogStoreWAL {
		cases = append(walCases, cases...)
		// meta.json's fields do not depend on the log store: once.
		for _, m := range metaFieldCases() {
			cases = append(cases, faultCase{m.name, meta, m.damage, m.want})
		}
	} else {
		cases = append(boltCases, cases...)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			copyDir(t, ft.full, dir)
			path := c.file(dir)
			c.damage(t, path)
			outcome, detail := startOnDamaged(t, dir, store, ft.want)
			t.Logf("%s: %s (%s)", c.name, outcome, detail)
			switch {
			case outcome == "panic":
				t.Fatalf("panicked: %s", detail)
			case outcome == refused && !strings.Contains(detail, filepath.Base(path)) && !strings.Contains(detail, dir):
				t.Fatalf("refused without naming %s: %s", path, detail)
			case outcome == refused && strings.HasPrefix(c.name, metaPrefix) && !strings.Contains(detail, "meta.json") && !strings.Contains(detail, "state.bin"):
				t.Fatalf("refused without naming the snapshot's meta.json or state.bin: %s", detail)
			case c.want == either && (outcome == refused || outcome == intact):
			case outcome != c.want:
				t.Fatalf("outcome %s, want %s: %s", outcome, c.want, detail)
			}
		})
	}
}

// startOnDamaged starts a node on dir: "refused" with the error, "intact"
// when it served every ticket of want unchanged, otherwise "served damaged
// state" with what differed.
func startOnDamaged(t *testing.T, dir, store string, want map[string]wire.Ticket) (outcome, detail string) {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Cluster.Raft.LogStore = store
	tn, err := tryStart(t, cfg, Deps{Env: noEnv}, true)
	if err != nil {
		var de *DataError
		if !errors.As(err, &de) && !strings.Contains(err.Error(), dir) {
			return "refused", "(not a DataError) " + err.Error()
		}
		return "refused", err.Error()
	}
	defer tn.stop()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	list, err := tn.c.List(ctx, "", 0)
	if err != nil {
		return "served damaged state", "list: " + err.Error()
	}
	got := map[string]wire.Ticket{}
	for _, tk := range list.Tickets {
		got[tk.Name] = tk
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			return "served damaged state", "ticket " + name + " lost or changed"
		}
	}
	// A new grant's token is above every token ever issued.
	g, err := tn.c.Grant(ctx, "after-damage", "h", 30)
	if err != nil {
		return "served damaged state", "grant: " + err.Error()
	}
	for _, w := range want {
		if g.Token <= w.Token {
			return "served damaged state", "fencing token reused"
		}
	}
	return "intact", "all tickets and tokens intact"
}

// metaPrefix starts the names of metaFieldCases.
const metaPrefix = "snapshot meta "

type metaCase struct {
	name   string
	damage func(*testing.T, string)
	want   string
}

// metaFieldCases change one field of the newest snapshot's meta.json at a
// time, as a digit or a character (the trial of issue 23 changed
// "Index":104 to "Index":9104 and was served): Raft trusts every one of
// them, and raft's CRC covers only state.bin. SPEC §4 (snapshots carry a
// format version and a checksum): each is refused naming the snapshot's
// file; rewriting the same values in another layout is harmless.
func metaFieldCases() []metaCase {
	top := `\{"Version":(-?\d+),"ID":"([^"]*)","Index":(\d+),"Term":(\d+),"Peers":"([^"]*)"`
	server := `"Servers":\[\{"Suffrage":(\d+),"ID":"([^"]*)","Address":"([^"]*)"\}`
	tail := `"ConfigurationIndex":(\d+),"Size":(\d+),"CRC":"([^"]*)"\}`
	add := func(d int64) func(string) string {
		return func(v string) string {
			n, _ := strconv.ParseInt(v, 10, 64)
			return strconv.FormatInt(n+d, 10)
		}
	}
	set := func(to string) func(string) string { return func(string) string { return to } }
	// otherChar changes the last character (a digit stays a digit).
	otherChar := func(v string) string {
		c := v[len(v)-1]
		switch {
		case c >= '0' && c <= '9':
			c = '0' + (c-'0'+1)%10
		case c == 'A':
			c = 'B'
		default:
			c = 'A'
		}
		return v[:len(v)-1] + string(c)
	}
	field := func(name, re string, group int, change func(string) string) metaCase {
		return metaCase{metaPrefix + name, editMeta(re, group, change), "refused"}
	}
	return []metaCase{
		field("Index +9000 (the trial's 104 → 9104)", top, 3, func(v string) string { return "9" + v }),
		field("Index +1", top, 3, add(1)),
		field("Index -1", top, 3, add(-1)),
		field("Term +1", top, 4, add(1)),
		field("Term -1", top, 4, add(-1)),
		field("Version 0", top, 1, set("0")),
		field("Version 2", top, 1, set("2")),
		field("ID's time changed", top, 2, otherChar),
		field("Peers changed", top, 5, otherChar),
		field("server Suffrage voter → nonvoter", server, 1, set("1")),
		field("server Suffrage voter → staging", server, 1, set("2")),
		field("server ID changed", server, 2, otherChar),
		field("server Address changed", server, 3, otherChar),
		field("ConfigurationIndex +1", tail, 1, add(1)),
		field("ConfigurationIndex 0", tail, 1, set("0")),
		field("Size +1", tail, 2, add(1)),
		field("Size -1", tail, 2, add(-1)),
		field("CRC changed", tail, 3, otherChar),
		field("unknown field added", tail, 3, func(v string) string { return v + `","Extra":"1` }),
		field("CRC's first byte changed", tail, 3, func(v string) string { return otherChar(v[:1]) + v[1:] }),
		// Metadata consistent in itself: only the position in state.bin
		// tells that it is not this snapshot's.
		{metaPrefix + "Index and ID changed together, the directory renamed", renameSnapshot(top, 0, 9000), "refused"},
		{metaPrefix + "Term and ID changed together, the directory renamed", renameSnapshot(top, 1, 0), "refused"},
		{metaPrefix + "server Address and Peers changed together", func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(top + `.*` + server).FindSubmatch(b)
			if m == nil {
				t.Fatalf("no match in %s", b)
			}
			addr := string(m[8])
			newAddr := otherChar(addr)
			peers, err := base64.StdEncoding.DecodeString(string(m[5]))
			if err != nil || !bytes.Contains(peers, []byte(addr)) {
				t.Fatalf("Peers %q does not hold %q (%v)", peers, addr, err)
			}
			newPeers := base64.StdEncoding.EncodeToString(bytes.Replace(peers, []byte(addr), []byte(newAddr), 1)) // same length: msgpack's header holds
			out := strings.Replace(string(b), `"Peers":"`+string(m[5])+`"`, `"Peers":"`+newPeers+`"`, 1)
			out = strings.Replace(out, `"Address":"`+addr+`"`, `"Address":"`+newAddr+`"`, 1)
			if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "refused"},
		{metaPrefix + "rewritten indented, same values", func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, b, "", "  "); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "intact"},
	}
}

// renameSnapshot adds dTerm to the Term and dIndex to the Index of a
// meta.json, changes its ID to match and renames its directory.
func renameSnapshot(top string, dTerm, dIndex uint64) func(*testing.T, string) {
	return func(t *testing.T, p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(top).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no match in %s", b)
		}
		ms := strings.SplitN(string(m[2]), "-", 3)[2]
		index, _ := strconv.ParseUint(string(m[3]), 10, 64)
		term, _ := strconv.ParseUint(string(m[4]), 10, 64)
		index, term = index+dIndex, term+dTerm
		newID := fmt.Sprintf("%d-%d-%s", term, index, ms)
		out := strings.Replace(string(b), string(m[0]), fmt.Sprintf(`{"Version":%s,"ID":"%s","Index":%d,"Term":%d,"Peers":"%s"`, m[1], newID, index, term, m[5]), 1)
		if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(p)
		if err := os.Rename(dir, filepath.Join(filepath.Dir(dir), newID)); err != nil {
			t.Fatal(err)
		}
		t.Logf("snapshot %s renamed %s", m[2], newID)
	}
}

// editMeta replaces submatch group of re's first match in the file with
// change(its text); a file without a match fails the test (the layout of
// raft's meta.json changed).
func editMeta(re string, group int, change func(string) string) func(*testing.T, string) {
	return func(t *testing.T, p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		loc := regexp.MustCompile(re).FindSubmatchIndex(b)
		if loc == nil {
			t.Fatalf("%s has no match of %s: %s", p, re, b)
		}
		at, end := loc[2*group], loc[2*group+1]
		old := string(b[at:end])
		out := append(append(append([]byte(nil), b[:at]...), change(old)...), b[end:]...)
		t.Logf("meta.json %q → %q", old, change(old))
		if err := os.WriteFile(p, out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
