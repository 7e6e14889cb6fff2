package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	v2loader "helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// versionShort is `helm version --short` of this build: the version, and the commit when the
// build names one.
func versionShort() string {
	v := common.DefaultCapabilities.HelmVersion
	if len(v.GitCommit) >= 7 {
		return fmt.Sprintf("%s+g%s", v.Version, v.GitCommit[:7])
	}
	return v.Version
}

// render does what `helm template` does for req (pkg/cmd/template.go and install.go of the same
// helm version, step by step in their order, so that the first error is the same one), with the
// chart from the cache. It returns the manifest text and whether the chart was cached.
func render(cache *cache, req *request) (string, bool, error) {
	var kubeVersion *common.KubeVersion
	if req.KubeVersion != "" {
		v, err := common.ParseKubeVersion(req.KubeVersion)
		if err != nil {
			return "", false, fmt.Errorf("invalid kube version '%s': %w", req.KubeVersion, err)
		}
		kubeVersion = v
	}
	if req.Chart == "" {
		return "", false, errors.New("no chart")
	}
	path := strings.TrimSpace(req.Chart)
	if _, err := os.Stat(path); err != nil {
		return "", false, fmt.Errorf("path %q not found", path)
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", false, err
	}

	vals := map[string]any{}
	for _, f := range req.Values {
		current, err := v2loader.LoadValues(bytes.NewReader([]byte(f.Content)))
		if err != nil {
			return "", false, fmt.Errorf("failed to parse %s: %w", f.Name, err)
		}
		vals = v2loader.MergeMaps(vals, current)
	}

	loaded, cached, err := cache.get(path, req.Group)
	if err != nil {
		return "", false, err
	}
	// The install action changes the chart it renders (dependencies enabled or not, aliases,
	// imported values): every render gets its own copy of the cached one.
	ch := cloneChart(loaded)

	ac, err := chart.NewAccessor(ch)
	if err != nil {
		return "", cached, err
	}
	if t := ac.MetadataAsMap()["Type"]; t != "" && t != "application" {
		return "", cached, fmt.Errorf("%s charts are not installable", t)
	}
	if reqs := ac.MetaDependencies(); len(reqs) > 0 {
		if err := action.CheckDependencies(ch, reqs); err != nil {
			return "", cached, fmt.Errorf("an error occurred while checking for chart dependencies. You may need to run 'helm dependency build' to fetch missing dependencies: %w", err)
		}
	}

	// As `helm template`: a client-only dry run against no cluster.
	cfg := action.NewConfiguration()
	if req.Probe {
		cfg.CustomTemplateFuncs = probeFuncs()
	}
	client := action.NewInstall(cfg)
	client.DryRunStrategy = action.DryRunClient
	client.Replace = true
	client.ReleaseName = req.Name
	client.Namespace = req.Namespace
	if client.Namespace == "" {
		client.Namespace = "default"
	}
	client.KubeVersion = kubeVersion
	client.APIVersions = common.VersionSet(nil)
	client.IncludeCRDs = req.IncludeCRDs

	ri, err := client.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		return "", cached, err
	}
	var rel *release.Release
	switch r := ri.(type) {
	case *release.Release:
		rel = r
	case release.Release:
		rel = &r
	default:
		return "", cached, fmt.Errorf("unsupported release type: %T", ri)
	}
	var out bytes.Buffer
	fmt.Fprintln(&out, strings.TrimSpace(rel.Manifest))
	for _, h := range rel.Hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.String(), cached, nil
}

// cloneChart copies what rendering may change of c and its dependencies (metadata, values,
// the dependency tree); templates and files are shared, helm only reads them.
func cloneChart(c *chartv2.Chart) *chartv2.Chart {
	out := *c
	out.Metadata = cloneMetadata(c.Metadata)
	out.Values = cloneMap(c.Values)
	deps := make([]*chartv2.Chart, 0, len(c.Dependencies()))
	for _, d := range c.Dependencies() {
		deps = append(deps, cloneChart(d))
	}
	out.SetDependencies(deps...)
	return &out
}

func cloneMetadata(m *chartv2.Metadata) *chartv2.Metadata {
	if m == nil {
		return nil
	}
	md := *m
	if m.Dependencies != nil {
		md.Dependencies = make([]*chartv2.Dependency, len(m.Dependencies))
		for i, d := range m.Dependencies {
			if d == nil {
				continue
			}
			dep := *d
			dep.Tags = append([]string(nil), d.Tags...)
			if d.ImportValues != nil {
				dep.ImportValues = make([]any, len(d.ImportValues))
				for j, v := range d.ImportValues {
					dep.ImportValues[j] = cloneValue(v)
				}
			}
			md.Dependencies[i] = &dep
		}
	}
	return &md
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneMap(t)
	case common.Values:
		return common.Values(cloneMap(t))
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(t))
		for k, e := range t {
			out[k] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}
