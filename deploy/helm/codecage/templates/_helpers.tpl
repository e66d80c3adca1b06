{{- define "codecage.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "codecage.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "codecage.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* The Secret each credential is read from. */}}
{{- define "codecage.keysSecret" -}}
{{- .Values.existingApiKeysSecret | default (include "codecage.fullname" .) -}}
{{- end -}}
{{- define "codecage.peerSecret" -}}
{{- .Values.existingPeerSecret | default (include "codecage.fullname" .) -}}
{{- end -}}
{{- define "codecage.snapshotSecret" -}}
{{- .Values.existingSnapshotSecret | default (include "codecage.fullname" .) -}}
{{- end -}}
{{- define "codecage.dbSecret" -}}
{{- .Values.postgres.existingSecret | default (include "codecage.fullname" .) -}}
{{- end -}}

{{- define "codecage.postgresURL" -}}
{{- if .Values.postgres.deploy -}}
postgres://codecage:{{ .Values.postgres.password }}@{{ include "codecage.fullname" . }}-postgres:5432/codecage?sslmode=disable
{{- else -}}
{{- .Values.postgres.url -}}
{{- end -}}
{{- end -}}
