"""`goodput report --send`: mails each team its page and posts each page's Markdown to a chat webhook.

Mail carries the charts as CID parts of a multipart/related HTML body (common mail clients drop `data:`
images and SVG), with the Markdown as the plain-text alternative. The SMTP password comes from the
environment variable `[report.mail] password_env` names, at the moment of sending, and is never logged.
"""

from __future__ import annotations

import json
import smtplib
import urllib.request
from email.message import EmailMessage

from contracts.config import ReportConfig, secret
from pipeline.report.data import Page, Report
from pipeline.report.render import html_page, markdown_page, page_charts, title

TIMEOUT_S = 30.0


class SendError(RuntimeError):
    """Delivery failed; the message names the server or URL and what it said."""


def mail_message(report: Report, page: Page, lang: str, sender: str, to: tuple[str, ...]) -> EmailMessage:
    images = page_charts(report, page, lang)
    msg = EmailMessage()
    msg["Subject"] = title(report, page, lang)
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg.set_content(markdown_page(report, page, lang))
    msg.add_alternative(html_page(report, page, lang, [], images, cid=True), subtype="html")
    html_part = msg.get_body(("html",))
    assert html_part is not None  # added just above
    for i, (_caption, png) in enumerate(images):
        html_part.add_related(png, "image", "png", cid=f"<chart{i}>", filename=f"chart{i}.png")
    return msg


def send(report: Report, cfg: ReportConfig, lang: str) -> dict[str, int]:
    """Sends what the config asks for; returns how many mails and webhook posts went out."""
    sent = {"mails": 0, "posts": 0}
    mail = cfg.mail
    if mail.smtp_host:
        try:
            with smtplib.SMTP(mail.smtp_host, mail.smtp_port, timeout=TIMEOUT_S) as smtp:
                if mail.starttls:
                    smtp.starttls()
                if mail.username:
                    smtp.login(mail.username, secret(mail.password_env, "[report.mail].password_env"))
                for page in report.pages:
                    to = mail.recipients.get("cluster" if page.team is None else page.team, ())
                    if to:
                        smtp.send_message(mail_message(report, page, lang, mail.sender, to))
                        sent["mails"] += 1
        except (OSError, smtplib.SMTPException) as e:
            raise SendError(f"mail via {mail.smtp_host}:{mail.smtp_port} failed: {e}") from None
    if cfg.webhook_url:
        for page in report.pages:
            body = json.dumps({"text": markdown_page(report, page, lang)}).encode()
            req = urllib.request.Request(
                cfg.webhook_url, body, {"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                    resp.read()
            except OSError as e:
                raise SendError(f"webhook post to {cfg.webhook_url} failed: {e}") from None
            sent["posts"] += 1
    return sent
