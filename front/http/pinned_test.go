package httpfront

import "testing"

// TestErrorNamesNestedField: a refused field inside a message that is
// itself a field (a limit's token bucket) is named by its whole path.
func TestErrorNamesNestedField(t *testing.T) {
	_, srv := newTestAPI(t)
	for body, want := range map[string]string{
		`{"key": "k", "limits": [{"token": {"max": 1, "refill_time": "soon"}}]}`: "limits[0].token.refill_time",
		`{"key": "k", "limits": [{"token": {"max": "many"}}]}`:                   "limits[0].token.max",
	} {
		code, out := call(t, srv, "Allow", body)
		field := ""
		if ds, _ := out["details"].([]any); len(ds) == 1 {
			d, _ := ds[0].(map[string]any)
			if vs, _ := d["fieldViolations"].([]any); len(vs) == 1 {
				field, _ = vs[0].(map[string]any)["field"].(string)
			}
		}
		if code != 400 || field != want {
			t.Errorf("Allow %s: %d %v; want 400 naming %q", body, code, out, want)
		}
	}
}
