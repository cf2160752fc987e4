package httpfront

import (
	"strings"
	"testing"
)

// TestBodyErrors: a body that is not JSON, not a JSON object, or a JSON
// object of the wrong shape is answered 400 with a message that says so
// and where: the byte offset, or the field (also in the BadRequest
// detail).
func TestBodyErrors(t *testing.T) {
	_, srv := newTestAPI(t)
	for _, tc := range []struct {
		method, body string
		field        string // of the BadRequest detail; "" for none
		message      string
	}{
		{"Increment", `{"key": `, "", "the request body is not valid JSON: it ends (at byte offset 8) before its JSON value does"},
		{"Increment", `{"key": "a",}`, "", "the request body is not valid JSON: invalid character '}' looking for beginning of object key string at byte offset 12"},
		{"Increment", `not json`, "", "the request body is not valid JSON: invalid character 'o' in literal null (expecting 'u') at byte offset 1"},
		{"Increment", `{"key":"k"} x`, "", "the request body is not valid JSON: invalid character 'x' after top-level value at byte offset 12"},
		{"Increment", ` [1, 2]`, "", "the request body is JSON but not an object: an array at byte offset 1; a request is a JSON object ({} for an empty request)"},
		{"Increment", `"k"`, "", "the request body is JSON but not an object: a string at byte offset 0; a request is a JSON object ({} for an empty request)"},
		{"Increment", `null`, "", "the request body is JSON but not an object: null at byte offset 0; a request is a JSON object ({} for an empty request)"},
		{"Increment", `{"key": 5}`, "key", "key: wrong JSON for this field, which takes a string: invalid value for string field key: 5 (line 1, column 9)"},
		{"Increment", `{"key": "k", "by": 1}`, "by", `by: unknown field "by" (line 1, column 14)`},
		{"Increment", `{"key": "k", "key": "j"}`, "key", `key: duplicate field "key" (line 1, column 14)`},
		{"Increment", `{"key": "k", "windowSize": 60}`, "window_size", `window_size: wrong JSON for this field, which takes a duration string such as "1.5s": `},
		{"Increment", `{"key": "k", "at": "yesterday"}`, "at", `at: wrong JSON for this field, which takes an RFC 3339 time string such as "2024-01-02T15:04:05Z": `},
		{"Allow", `{"key": "k", "limits": 5}`, "limits", "limits: wrong JSON for this field, which takes an array: unexpected token 5 (line 1, column 24)"},
		{"Allow", `{"key": "k", "limits": [{"limit": 1}, 5]}`, "limits[1]", "limits[1]: wrong JSON for this field, which takes an object: unexpected token 5 (line 1, column 39)"},
		{"Allow", `{"key": "k", "limits": [{"limit": "many"}]}`, "limits[0].limit", "limits[0].limit: wrong JSON for this field, which takes a number: "},
		{"Allow", `{"key": "k", "countRejected": "yes"}`, "count_rejected", "count_rejected: wrong JSON for this field, which takes true or false: "},
	} {
		code, out := call(t, srv, tc.method, tc.body)
		field := ""
		if ds, _ := out["details"].([]any); len(ds) == 1 {
			d, _ := ds[0].(map[string]any)
			if vs, _ := d["fieldViolations"].([]any); d["@type"] == "type.googleapis.com/google.rpc.BadRequest" && len(vs) == 1 {
				field, _ = vs[0].(map[string]any)["field"].(string)
			}
		}
		msg, _ := out["message"].(string)
		if code != 400 || field != tc.field || !strings.HasPrefix(msg, tc.message) || strings.Contains(msg, "proto:") {
			t.Errorf("%s %s: %d %q (field %q); want 400 %q (field %q)", tc.method, tc.body, code, msg, field, tc.message, tc.field)
		}
	}
}
