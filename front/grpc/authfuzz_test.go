package grpcfront

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

// FuzzAuthMetadata: whatever authorization values a call's metadata
// holds, its principal is the configured token's only when the first
// value is "Bearer <that token>", and nothing panics.
func FuzzAuthMetadata(f *testing.F) {
	for _, v := range [][2]string{{"Bearer " + testToken, ""}, {"bearer " + testToken, "Bearer x"}, {"Basic " + testToken, "Bearer " + testToken},
		{"Bearer\t" + testToken, ""}, {"Bearer " + testToken + "\x00", ""}, {"", "Bearer " + testToken}} {
		f.Add(v[0], v[1])
	}
	a := newAuthorizer(f)
	f.Fuzz(func(t *testing.T, first, second string) {
		md := metadata.MD{"authorization": {first, second}}
		p := principal(metadata.NewIncomingContext(context.Background(), md), a)
		if p != nil && (!strings.EqualFold(first[:7], "bearer ") || trimmedAfterScheme(first) != testToken) {
			t.Fatalf("%q, %q: principal %s", first, second, p.Name())
		}
		if p == nil && strings.HasPrefix(first, "Bearer ") && trimmedAfterScheme(first) == testToken {
			t.Fatalf("%q: no principal", first)
		}
	})
}

// trimmedAfterScheme is what follows a 7-byte scheme, trimmed of spaces
// and tabs, or "".
func trimmedAfterScheme(v string) string {
	if len(v) < 7 {
		return ""
	}
	s := v[7:]
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
