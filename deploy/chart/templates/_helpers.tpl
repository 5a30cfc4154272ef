{{/*
Names. fullname is the release name when it contains the chart's name ("fault-agent"), else
<release>-fault-agent; fullnameOverride wins. The selector labels carry no release name: one release per
namespace, and the same selector as the kustomize base, so a Deployment installed with kustomize can be
adopted by the chart (a Deployment's selector cannot change).
*/}}
{{- define "fault-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fault-agent.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{- define "fault-agent.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "fault-agent.fullname" .) -}}
{{- end -}}

{{- define "fault-agent.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object's metadata: the kustomize base's two, plus Helm's standard ones. */}}
{{- define "fault-agent.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "fault-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* The agent's YAML settings: .Values.settings with leader.namespace defaulting to the objects' namespace. */}}
{{- define "fault-agent.settings" -}}
{{- $settings := deepCopy (.Values.settings | default dict) -}}
{{- $leader := get $settings "leader" | default dict -}}
{{- if not (hasKey $leader "namespace") -}}
{{- $_ := set $leader "namespace" (include "fault-agent.namespace" .) -}}
{{- end -}}
{{- $_ := set $settings "leader" $leader -}}
{{- toYaml $settings -}}
{{- end -}}
