{{/*
The chart renders the kustomize base deploy/ and its components: the same names, namespaces and
labels (no helm-specific labels, so the two stay comparable object by object and an install can
move from one to the other). What deploy/ holds as plain YAML the chart reads from files/ (links
into deploy/, resolved by `helm package`) through "stacksync.fromFile"; what values change is
templated here, and tests/chart.rs holds both to the base.
*/}}

{{/* The image: <repository>@<digest> when a digest is set, else <repository>:<tag>. */}}
{{- define "stacksync.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/*
metadata.labels and metadata.annotations: the object's own labels (a dict, may be empty) with
the chart-wide `labels` and `annotations` values added; nothing when both are empty.
Call: include "stacksync.meta" (list $ $ownLabels)
*/}}
{{- define "stacksync.meta" -}}
{{- $root := index . 0 -}}
{{- $out := dict -}}
{{- with merge (deepCopy (index . 1)) $root.Values.labels }}{{ $_ := set $out "labels" . }}{{ end -}}
{{- with $root.Values.annotations }}{{ $_ := set $out "annotations" . }}{{ end -}}
{{- with $out }}{{ toYaml . }}{{ end -}}
{{- end }}

{{/*
Every document of a file of files/ (a link into deploy/), as the base has it, but in the release's
namespace: metadata.namespace and RBAC subjects' namespace become the release's, and the
chart-wide labels and annotations are added. `extra` annotations are added too (the CRDs' keep
policy). Call: include "stacksync.fromFile" (dict "root" $ "file" "files/rbac.yaml" "annotations" (dict))
*/}}
{{- define "stacksync.fromFile" -}}
{{- $root := .root -}}
{{- $text := $root.Files.Get .file -}}
{{- if not $text }}{{ fail (printf "%s is missing from the chart" .file) }}{{ end -}}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $.file $obj.Error) }}{{ end }}
{{- if $obj }}
{{- $meta := $obj.metadata }}
{{- if hasKey $meta "namespace" }}{{ $_ := set $meta "namespace" $root.Release.Namespace }}{{ end }}
{{- range $obj.subjects }}{{ if hasKey . "namespace" }}{{ $_ := set . "namespace" $root.Release.Namespace }}{{ end }}{{ end }}
{{- $labels := merge (default dict $meta.labels) $root.Values.labels }}
{{- if $labels }}{{ $_ := set $meta "labels" $labels }}{{ end }}
{{- $annotations := merge (default dict $meta.annotations) $.annotations $root.Values.annotations }}
{{- if $annotations }}{{ $_ := set $meta "annotations" $annotations }}{{ end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The workloads: one `stacksync` without shards, else one `stacksync-<shard>` per shard. Each a
dict: name, shard, selector (the Pods' identifying labels).
*/}}
{{- define "stacksync.workloads" -}}
{{- $list := list -}}
{{- if .Values.shards -}}
{{- range .Values.shards -}}
{{- $list = append $list (dict "name" (printf "stacksync-%s" .) "shard" . "selector" (dict "app.kubernetes.io/name" "stacksync" "stacksync.io/shard" .)) -}}
{{- end -}}
{{- else -}}
{{- $list = append $list (dict "name" "stacksync" "shard" "" "selector" (dict "app.kubernetes.io/name" "stacksync")) -}}
{{- end -}}
{{- toJson $list -}}
{{- end }}
