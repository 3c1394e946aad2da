{{/*
The prefix of every object's name: the release's name when it contains
"subnet-operator" (so a release named subnet-operator names its objects as
config/default does), else "<release>-subnet-operator". 40 characters at
most, so "<prefix>-metrics-service" stays a DNS label.
*/}}
{{- define "subnet-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels Helm's conventions add to every object's metadata. */}}
{{- define "subnet-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The manager's image: by digest when one is set. */}}
{{- define "subnet-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
One generated document (files/*.yaml, kustomize's names) for this release:
the namespace subnet-operator-system becomes the release's, and the name
prefix "subnet-operator-" this release's. The prefix is replaced only where
a name starts (not inside the webhooks' paths, "...-ipam-subnet-operator-io-...").
*/}}
{{- define "subnet-operator.rewrite" -}}
{{- $doc := .doc | replace "subnet-operator-system" "__RELEASE_NAMESPACE__" -}}
{{- $doc = regexReplaceAll "([^-a-z0-9.])subnet-operator-" $doc (printf "${1}%s-" (include "subnet-operator.fullname" .ctx)) -}}
{{- $doc | replace "__RELEASE_NAMESPACE__" .ctx.Release.Namespace -}}
{{- end -}}

{{/*
The member's hub kubeconfig Secret, {namespace, name}: by default
"<prefix>-hub-kubeconfig" in the release's namespace (config/fleet-member's
subnet-operator-system/subnet-operator-hub-kubeconfig).
*/}}
{{- define "subnet-operator.hubKubeconfigSecret" -}}
namespace: {{ .Values.fleet.member.hubKubeconfigSecret.namespace | default .Release.Namespace }}
name: {{ .Values.fleet.member.hubKubeconfigSecret.name | default (printf "%s-hub-kubeconfig" (include "subnet-operator.fullname" .)) }}
{{- end -}}
