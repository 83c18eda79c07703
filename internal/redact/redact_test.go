package redact

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://user:s3cret@host:6379/0", "redis://user:xxxxx@host:6379/0"},
		{"rediss://:s3cret@host:6379", "rediss://:xxxxx@host:6379"},
		{"postgres://u@h/db?sslmode=require&password=s3cret", "postgres://u@h/db?password=xxxxx&sslmode=require"},
		{"http://h:8500?token=s3cret", "http://h:8500?token=xxxxx"},
		{"redis://user:s3cret@host:6379/0 x y%zz", "redis://user:xxxxx@host:6379/0 x y%zz"}, // does not parse
		{"host:6379", "host:6379"},
		{"redis://host:6379/0", "redis://host:6379/0"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	// A URL's password goes without being named; other secrets when named.
	got := Text(`parse "redis://u:s3cret@h:1/%zz": bad; token abc123`, "abc123", "")
	if want := `parse "redis://u:xxxxx@h:1/%zz": bad; token xxxxx`; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	base := fmt.Errorf("dial redis://u:s3cret@h:1: %w", io.EOF)
	err := Error(base, "s3cret")
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("message keeps the secret: %v", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Error("errors.Is does not see the wrapped error")
	}
	if plain := errors.New("nothing secret"); Error(plain, "s3cret") != plain {
		t.Error("an error without secrets is not returned as it is")
	}
}
