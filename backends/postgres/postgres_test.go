package postgres

import "testing"

// TestAddrKeepsCredentialsAndTLS: pointing a client at a fault proxy (Addr)
// keeps the connection string's password and each TLS attempt that its
// sslmode asks for, all sent to Addr, with verify-full still checking the
// original host name.
func TestAddrKeepsCredentialsAndTLS(t *testing.T) {
	for _, tc := range []struct {
		sslmode  string
		attempts []bool // TLS per attempt, in order
	}{
		{"disable", []bool{false}},
		{"prefer", []bool{true, false}},
		{"allow", []bool{false, true}},
		{"require", []bool{true}},
		{"verify-full", []bool{true}},
	} {
		t.Run(tc.sslmode, func(t *testing.T) {
			l, err := New(Config{ConnString: "postgres://app:s3cret@db.example:5432/app?sslmode=" + tc.sslmode,
				Addr: "127.0.0.1:6000", Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			cc := l.(*locker).cfg
			if cc.Password != "s3cret" || cc.User != "app" {
				t.Errorf("user %q password %q: want the connection string's", cc.User, cc.Password)
			}
			got := []bool{cc.TLSConfig != nil}
			if cc.Host != "127.0.0.1" || cc.Port != 6000 {
				t.Errorf("first attempt to %s:%d, want Addr", cc.Host, cc.Port)
			}
			for _, f := range cc.Fallbacks {
				got = append(got, f.TLSConfig != nil)
				if f.Host != "127.0.0.1" || f.Port != 6000 {
					t.Errorf("fallback to %s:%d, want Addr", f.Host, f.Port)
				}
			}
			if len(got) != len(tc.attempts) {
				t.Fatalf("TLS per attempt %v, want %v", got, tc.attempts)
			}
			for i := range got {
				if got[i] != tc.attempts[i] {
					t.Fatalf("TLS per attempt %v, want %v", got, tc.attempts)
				}
			}
			if tc.sslmode == "verify-full" && cc.TLSConfig.ServerName != "db.example" {
				t.Errorf("verify-full checks %q, want the original host db.example", cc.TLSConfig.ServerName)
			}
		})
	}
}
