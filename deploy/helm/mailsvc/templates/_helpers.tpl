{{/* The chart's name: "mailsvc" or nameOverride. */}}
{{- define "mailsvc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, the release name when it contains the chart's
name, else RELEASE-NAME. At most 55 characters, so that NAME-intake and NAME-webhooks fit. */}}
{{- define "mailsvc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "mailsvc.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of the release's pods (add app.kubernetes.io/component per Deployment).
app.kubernetes.io/instance names the deployment: the alert rules count relay leaders by it. */}}
{{- define "mailsvc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mailsvc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "mailsvc.labels" -}}
{{ include "mailsvc.selectorLabels" . }}
app.kubernetes.io/part-of: mailsvc
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "mailsvc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mailsvc.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "mailsvc.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The config file: .Values.config with the listener addresses from the ports. Fails when a
secret is in the values: secrets come from existingSecret only. */}}
{{- define "mailsvc.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- range $key := list "database.url" "amqp.url" "amqp.management_url" "smtp.password" "resend.api_key" "webhooks.resend_secret" "bounces.secret" "bounces.imap_url" "console.session_secret" -}}
{{- $parts := splitList "." $key -}}
{{- $section := get $cfg (first $parts) | default dict -}}
{{- if get $section (last $parts) -}}
{{- fail (printf "values: config.%s is a secret: put it in the Secret %q (see existingSecret in values.yaml), not in values" $key $.Values.existingSecret) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "http" (merge (dict "addr" (printf ":%d" (int .Values.http.port))) (get $cfg "http" | default dict)) -}}
{{- $_ := set $cfg "webhooks" (merge (dict "addr" (ternary (printf ":%d" (int .Values.webhooks.port)) "" .Values.webhooks.enabled)) (get $cfg "webhooks" | default dict)) -}}
{{- $_ := set $cfg "console" (merge (dict "addr" (ternary (printf ":%d" (int .Values.console.port)) "" .Values.console.enabled)) (get $cfg "console" | default dict)) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The environment of every mailsvc container: the config file, the secrets from
existingSecret (optional but the two URLs), GOMEMLIMIT when given, extraEnv. */}}
{{- define "mailsvc.env" -}}
{{- $root := index . 0 -}}
{{- $gomemlimit := index . 1 -}}
- name: MAILSVC_CONFIG
  value: /etc/mailsvc/mailsvc.yaml
{{- range $env, $key := dict "MAILSVC_DATABASE_URL" "database-url" "MAILSVC_AMQP_URL" "amqp-url" }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- range $env, $key := dict "MAILSVC_AMQP_MANAGEMENT_URL" "amqp-management-url" "MAILSVC_SMTP_PASSWORD" "smtp-password" "MAILSVC_RESEND_API_KEY" "resend-api-key" "MAILSVC_WEBHOOKS_RESEND_SECRET" "resend-webhook-secret" "MAILSVC_BOUNCES_SECRET" "bounce-secret" "MAILSVC_BOUNCES_IMAP_URL" "bounces-imap-url" "MAILSVC_CONSOLE_SESSION_SECRET" "console-session-secret" }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $root.Values.existingSecret }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- if $gomemlimit }}
- name: GOMEMLIMIT
  value: {{ $gomemlimit | quote }}
{{- end }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "mailsvc.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mailsvc.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
