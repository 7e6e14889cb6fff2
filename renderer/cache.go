package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"helm.sh/helm/v4/pkg/chart/loader"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

const (
	// defaultCacheBytes bounds the size of the charts kept, counted as the size of their files.
	defaultCacheBytes = 512 << 20
	// defaultCacheCharts bounds how many charts are kept.
	defaultCacheCharts = 256
)

// cache keeps loaded charts by path. An entry is reused while a fingerprint of the chart's files
// (their names, sizes, modification times and modes) is unchanged: a release directory, which never
// changes, is loaded once; a chart rewritten in place is loaded again. The least recently used
// charts go first past the bounds; "retain" drops a collected release's charts at once.
type cache struct {
	mu       sync.Mutex
	entries  map[string]*entry
	clock    uint64
	bytes    int64
	maxBytes int64
	maxCount int
}

type entry struct {
	fingerprint string
	chart       *chartv2.Chart
	group       string
	bytes       int64
	used        uint64
}

func newCache(maxBytes int64, maxCount int) *cache {
	return &cache{entries: map[string]*entry{}, maxBytes: maxBytes, maxCount: maxCount}
}

// get returns the chart at path (absolute), loading it when it is not cached or changed.
// The chart returned must not be changed (clone it first).
func (c *cache) get(path, group string) (*chartv2.Chart, bool, error) {
	fp, size, err := fingerprint(path)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	if e, ok := c.entries[path]; ok && e.fingerprint == fp {
		c.clock++
		e.used = c.clock
		if group != "" {
			e.group = group
		}
		c.mu.Unlock()
		return e.chart, true, nil
	}
	c.mu.Unlock()

	// Loaded outside the lock: two renders of a new chart at once may both load it.
	loaded, err := loader.Load(path)
	if err != nil {
		return nil, false, err
	}
	ch, ok := loaded.(*chartv2.Chart)
	if !ok {
		// helm's install action renders chart API v2 (apiVersion v1 and v2) only.
		return nil, false, fmt.Errorf("invalid chart apiVersion")
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[path]; ok {
		c.bytes -= old.bytes
		delete(c.entries, path)
	}
	if size <= c.maxBytes {
		c.clock++
		c.entries[path] = &entry{fingerprint: fp, chart: ch, group: group, bytes: size, used: c.clock}
		c.bytes += size
		c.evict()
	}
	return ch, false, nil
}

// evict drops the least recently used charts until the bounds hold. Called with mu held.
func (c *cache) evict() {
	for c.bytes > c.maxBytes || len(c.entries) > c.maxCount {
		var oldest string
		var used uint64
		for p, e := range c.entries {
			if oldest == "" || e.used < used {
				oldest, used = p, e.used
			}
		}
		if oldest == "" {
			return
		}
		c.bytes -= c.entries[oldest].bytes
		delete(c.entries, oldest)
	}
}

// retain drops every chart of a group not in groups (charts rendered without a group stay),
// and every chart whose path is gone. It returns how many it dropped.
func (c *cache) retain(groups []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped := 0
	for p, e := range c.entries {
		_, err := os.Stat(p)
		if (e.group != "" && !slices.Contains(groups, e.group)) || err != nil {
			c.bytes -= e.bytes
			delete(c.entries, p)
			dropped++
		}
	}
	return dropped
}

// fingerprint describes the files of the chart at path, and adds up their sizes.
func fingerprint(path string) (string, int64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	if !info.IsDir() {
		return describe(info), info.Size(), nil
	}
	var fp []byte
	var size int64
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Stat, not Lstat: helm's loader follows symbolic links.
		i, err := os.Stat(p)
		if err != nil {
			return err
		}
		fp = append(fp, p...)
		fp = append(fp, 0)
		fp = append(fp, describe(i)...)
		size += i.Size()
		return nil
	})
	return string(fp), size, err
}

func describe(i fs.FileInfo) string {
	return fmt.Sprintf("%d %d %o;", i.Size(), i.ModTime().UnixNano(), i.Mode())
}
