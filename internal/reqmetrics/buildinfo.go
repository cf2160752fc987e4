package reqmetrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterBuildInfo registers limiterd_build_info with reg: a gauge of 1
// whose labels are the module version, the Go version and the VCS
// revision the binary was built from ("unknown" when the build did not
// record one, as with -buildvcs=false).
func RegisterBuildInfo(reg prometheus.Registerer) error {
	bi, ok := debug.ReadBuildInfo()
	return reg.Register(buildInfo(bi, ok))
}

func buildInfo(bi *debug.BuildInfo, ok bool) prometheus.Collector {
	version, goVersion, revision := "unknown", "unknown", "unknown"
	if ok && bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "limiterd_build_info",
		Help:        "1, labelled with the version, Go version and VCS revision limiterd was built from.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": goVersion, "revision": revision}})
	g.Set(1)
	return g
}
