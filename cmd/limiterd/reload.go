package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadSettle is how long the config file must stay unchanged (and not
// empty) before a change of it is reloaded: editors, Kubernetes and
// os.WriteFile write a file in several steps, and a file caught between
// them would be a valid config of its own (an empty one serves only the
// default namespace).
const reloadSettle = 200 * time.Millisecond

// reload reads the config file again and applies its namespaces, stores
// and sync settings (namespaces.go). A file with errors changes nothing;
// the errors say why.
func (d *daemon) reload(ctx context.Context) (string, error) {
	if d.load == nil {
		return "", errNoReload
	}
	cfg, err := d.load()
	if err != nil {
		return "", err
	}
	return d.apply(ctx, cfg)
}

// watchConfig reloads on SIGHUP and when the config file's content
// changes, until ctx ends. It watches the file's directory, not the file:
// an editor's or Kubernetes' replace of the file is then seen too.
func (d *daemon) watchConfig(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var events <-chan fsnotify.Event
	var errs <-chan error
	last, _ := os.ReadFile(d.configPath)
	if w, err := fsnotify.NewWatcher(); err != nil {
		d.log.Warn("config file changes are not watched; reload with SIGHUP", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(d.configPath)); err != nil {
			d.log.Warn("config file changes are not watched; reload with SIGHUP", "file", d.configPath, "err", err)
		}
		events, errs = w.Events, w.Errors
	}
	var pending []byte // the content seen at the last look
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	do := func(how string) {
		summary, err := d.reload(ctx)
		if err != nil {
			attrs := []any{"how", how, "file", d.configPath}
			for _, e := range flatten(err) {
				attrs = append(attrs, "err", e.Error())
			}
			d.log.Error("reload refused; the running config stays", attrs...)
			return
		}
		d.log.Info("namespaces changed", "how", how, "summary", summary)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			last, _ = os.ReadFile(d.configPath)
			do("SIGHUP")
		case <-events:
			settle.Reset(reloadSettle)
		case err := <-errs:
			d.log.Warn("watching the config file", "err", err)
		case <-settle.C:
			data, err := os.ReadFile(d.configPath)
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
