// Package redact keeps secrets out of error messages: URLs with passwords,
// and any secret value a caller knows.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// userinfo matches the password part of scheme://user:password@ in text
// that may not parse as a URL.
var userinfo = regexp.MustCompile(`(://[^:/@\s]*):[^@\s]*@`)

// URL returns s with the password of its user info replaced by Mask (as
// url.URL.Redacted does), and the value of any password= or token= query
// parameter too. s need not parse: a string that does not is masked by
// pattern.
func URL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		q := u.Query()
		masked := false
		for k := range q {
			if sensitive(k) {
				q.Set(k, Mask)
				masked = true
			}
		}
		if masked {
			u.RawQuery = q.Encode()
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
		return u.String()
	}
	return userinfo.ReplaceAllString(s, "$1:"+Mask+"@")
}

func sensitive(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || strings.Contains(k, "token") || k == "sslkey" || k == "secret"
}

// Text returns s with every URL password masked (see URL) and every one of
// secrets (non-empty ones) replaced by Mask.
func Text(s string, secrets ...string) string {
	s = userinfo.ReplaceAllString(s, "$1:"+Mask+"@")
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	return s
}

// Error returns err with its message passed through Text; errors.Is and
// errors.As still see err. It returns nil for nil.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := Text(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &redacted{msg, err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
