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
{{- $kafka := include "fault-agent.kafkaTLSSettings" . | fromYaml -}}
{{- if $kafka -}}
{{- $_ := set $settings "kafka" $kafka -}}
{{- end -}}
{{- toYaml $settings -}}
{{- end -}}

{{/* Where the kafkaTLS Secrets are mounted (read-only) and the names of the files in it. */}}
{{- define "fault-agent.kafkaTLSDir" -}}/etc/kafka-tls{{- end -}}

{{/*
settings.kafka with the kafkaTLS values applied (YAML; empty when kafkaTLS is off): security_protocol SSL unless
settings say SASL_SSL, ssl_cafile / ssl_certfile / ssl_keyfile at the mounted files. Refuses values that cannot
work together, naming them.
*/}}
{{- define "fault-agent.kafkaTLSSettings" -}}
{{- $tls := .Values.kafkaTLS | default dict -}}
{{- $ca := dig "caSecret" "name" "" $tls -}}
{{- $client := dig "clientSecret" "name" "" $tls -}}
{{- if $tls.enabled -}}
{{- $kafka := deepCopy (get (.Values.settings | default dict) "kafka" | default dict) -}}
{{- $proto := get $kafka "security_protocol" | default "SSL" -}}
{{- if not (has $proto (list "SSL" "SASL_SSL")) -}}
{{- fail (printf "kafkaTLS.enabled is true but settings.kafka.security_protocol is %s: Kafka over TLS is SSL, or SASL_SSL with SASL" $proto) -}}
{{- end -}}
{{- $_ := set $kafka "security_protocol" $proto -}}
{{- $dir := include "fault-agent.kafkaTLSDir" . -}}
{{- $files := dict -}}
{{- if $ca -}}
{{- $_ := set $files "ssl_cafile" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- if $client -}}
{{- $_ := set $files "ssl_certfile" (printf "%s/client.crt" $dir) -}}
{{- $_ := set $files "ssl_keyfile" (printf "%s/client.key" $dir) -}}
{{- end -}}
{{- range $name, $path := $files -}}
{{- if get $kafka $name -}}
{{- fail (printf "settings.kafka.%s is set and kafkaTLS mounts that file from a Secret: remove one of them" $name) -}}
{{- end -}}
{{- $_ := set $kafka $name $path -}}
{{- end -}}
{{- toYaml $kafka -}}
{{- else if or $ca $client -}}
{{- fail "kafkaTLS.caSecret.name or kafkaTLS.clientSecret.name is set but kafkaTLS.enabled is false: set kafkaTLS.enabled=true to use them" -}}
{{- end -}}
{{- end -}}
