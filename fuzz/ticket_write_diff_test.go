package fuzz

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tckclk/tckclk/node/api"
	"github.com/tckclk/tckclk/node/api/wire"
)

// FuzzWriteDecoders: the single grant, renew and release endpoints' fast
// body reading (api.DecodeWrite: the batch ops' scanner, then
// encoding/json for anything else) against encoding/json's strict
// decoder alone (api.DecodeWriteReference). For every body and each op:
// the same Write, or the same refusal word for word.
func FuzzWriteDecoders(f *testing.F) {
	for _, v := range []any{
		wire.GrantRequest{Holder: "worker-7", LeaseS: 30},
		wire.GrantRequest{Holder: "h", LeaseS: 30, WaitMs: 1500},
		wire.RenewRequest{Holder: "h", Token: 9, LeaseS: 250},
		wire.ReleaseRequest{Holder: "h i", Token: 18446744073709551615},
	} {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	for _, s := range []string{
		`{"holder":"h","lease_s":30}`, ` { "holder" : "h" , "lease_s" : 30 } `,
		"{\"holder\":\"h\",\r\n\t\"token\":1}\n", `{"lease_s":30,"holder":"h"}`,
		`{"holder":"h","lease_s":-0}`, `{"holder":"h","lease_s":030}`, `{"holder":"h","lease_s":3.0}`,
		`{"holder":"h","lease_s":3e1}`, `{"holder":"h","lease_s":-9223372036854775808}`,
		`{"holder":"h","lease_s":9223372036854775808}`, `{"holder":"h","lease_s":999999999999999999}`,
		`{"holder":"h","lease_s":256}`, `{"holder":"h","lease_s":0}`, `{"holder":"","lease_s":5}`,
		`{"holder":"h","token":18446744073709551616,"lease_s":3}`, `{"holder":"h","token":-1,"lease_s":3}`,
		`{"holder":"h","token":0}`, `{"holder":"h\u0020i","token":1}`, `{"holder":"h\"i","token":1}`,
		`{"holder":"h` + "\xff" + `","token":1}`, `{"holder":"h` + "\x7f\x01" + `","token":1}`,
		`{"holder":"h","lease_s":30,"wait_ms":300000}`, `{"holder":"h","lease_s":30,"wait_ms":300001}`,
		`{"holder":"h","lease_s":30,"wait_ms":99999999999999999999}`, `{"holder":"h","lease_s":30,"holder":"g"}`,
		`{"holder":"h","lease_s":30,"x":{"y":[1]}}`, `{"holder":null,"lease_s":30}`, `{"holder":"h","lease_s":"30"}`,
		`{"holder":"h","lease_s":30,}`, `{"holder":"h","lease_s":30} {}`, `{"holder":"h","lease_s":30}` + "\v",
		"\u00a0" + `{"holder":"h","lease_s":30}`, `{"holder":"h"}`, `{"lease_s":30}`, `{}`, ``, `[]`, `null`,
		`{"holder":"h","token":1,"lease_s":30,"wait_ms":0}`, `{"op":"grant","holder":"h","lease_s":30}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, op := range []string{"grant", "renew", "release"} {
			w, err := api.DecodeWrite(op, "a", body)
			rw, rerr := api.DecodeWriteReference(op, "a", body)
			if w != rw || fmt.Sprintf("%+v", err) != fmt.Sprintf("%+v", rerr) {
				t.Fatalf("%s %q: DecodeWrite %+v %+v; the reference %+v %+v", op, body, w, err, rw, rerr)
			}
		}
	})
}
