{{/* Command-line arguments of a kubeadm component: a map in v1beta1, a list in v1beta2. */}}
{{- define "scs.args" -}}
{{- if eq .version "v1beta1" -}}
{{- range $k, $v := .args }}
{{ $k }}: {{ $v | quote }}
{{- end -}}
{{- else -}}
{{- range $k, $v := .args }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "scs.name" -}}
{{ .Release.Name }}-{{ .Chart.Version }}
{{- end -}}
