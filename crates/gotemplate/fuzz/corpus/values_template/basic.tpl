{{ if .Values.s }}{{ range $i, $v := .Values.list }}{{ $i }}={{ $v }}{{ end }}{{ else }}{{ .Cluster.metadata.name | printf "%q" }}{{ end }}
{{ with .Values.map }}{{ .k }}{{ end }}{{ index .Values.map "k" }}
