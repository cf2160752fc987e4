package live

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/limiterd/limiterd/internal/config"
)

// reloadSettle is how long the config file must stay unchanged (and not
// empty) before a change of it is reloaded: editors, Kubernetes and
// os.WriteFile write a file in several steps, and a file caught between
// them would be a valid config of its own (an empty one serves only the
// default namespace).
const reloadSettle = 200 * time.Millisecond

// Watch reloads (Reload) on each value from hup (SIGHUP) and when the
// config file at path changes, until ctx ends. It watches the file's
// directory, not the file: an editor's or Kubernetes' replace of the file
// is then seen too.
func (o *Owner) Watch(ctx context.Context, path string, hup <-chan os.Signal) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	last, _ := os.ReadFile(path)
	if w, err := fsnotify.NewWatcher(); err != nil {
		o.opts.Log.Warn("config file changes are not watched; reload with SIGHUP", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(path)); err != nil {
			o.opts.Log.Warn("config file changes are not watched; reload with SIGHUP", "file", path, "err", err)
		}
		events, errs = w.Events, w.Errors
	}
	var pending []byte // the content seen at the last look
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	do := func(how string) {
		summary, err := o.Reload(ctx)
		if err != nil {
			attrs := []any{"how", how, "file", path}
			for _, e := range config.Flatten(err) {
				attrs = append(attrs, "err", e.Error())
			}
			o.opts.Log.Error("reload refused; the running config stays", attrs...)
			return
		}
		o.opts.Log.Info("namespaces changed", "how", how, "summary", summary)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			last, _ = os.ReadFile(path)
			do("SIGHUP")
		case <-events:
			settle.Reset(reloadSettle)
		case err := <-errs:
			o.opts.Log.Warn("watching the config file", "err", err)
		case <-settle.C:
			data, err := os.ReadFile(path)
			if err != nil || len(data) == 0 || bytes.Equal(data, last) {
				continue // gone or empty for a moment (being written), or not changed
			}
			if !bytes.Equal(data, pending) {
				// Changed since the last look: reload once it stays
				// the same for a settle time.
				pending = data
				settle.Reset(reloadSettle)
				continue
			}
			last = data
			do("file change")
		}
	}
}
