"""Opens a local HTML page in headless Chromium (Debian's chromium and chromium-driver, driven
by selenium) and reports what a reader would get: its text, its images as loaded, every request
and reference that leaves the page, and what the page's markup is: its elements, the event
handlers and links they carry, and the dialogs its scripts opened."""
from __future__ import annotations

import dataclasses
import tempfile
from typing import List, Tuple

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Headless as root, with none of Chromium's own background traffic (this machine has no
# network; without these flags Chromium keeps trying Google's hosts), and every host name
# unresolvable, so a reference outside the page cannot load from anywhere.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND")

_IMAGES = ("return Array.from(document.images).map(i => "
           "[i.alt, i.complete && i.naturalWidth > 0, i.getAttribute('src').slice(0, 22)])")
_REQUESTS = "return performance.getEntriesByType('resource').map(e => e.name)"
_ELEMENTS = "return Array.from(document.querySelectorAll('*')).map(e => e.tagName.toLowerCase())"
_HANDLERS = ("return Array.from(document.querySelectorAll('*')).flatMap(e => "
             "Array.from(e.attributes).filter(a => a.name.toLowerCase().startsWith('on'))"
             ".map(a => e.tagName.toLowerCase() + ' ' + a.name + '=' + a.value))")
_LINKS = ("return Array.from(document.querySelectorAll('a, area, [href]')).map(e => "
          "e.tagName.toLowerCase() + ' ' + (e.getAttribute('href') || ''))")
# Installed before any of the page's own scripts: alert, confirm and prompt record their message
# instead of blocking, so a script the page runs shows up in `dialogs`.
_RECORD_DIALOGS = ("window.__dialogs = [];"
                   "for (const name of ['alert', 'confirm', 'prompt'])"
                   "  window[name] = message => { window.__dialogs.push(String(message)); };")
_REFERENCES = ("return Array.from(document.querySelectorAll('[src], [href]')).map(e => "
               "e.getAttribute('src') || e.getAttribute('href'))"
               ".filter(u => !u.startsWith('data:') && !u.startsWith('#'))")


@dataclasses.dataclass(frozen=True)
class Page:
  content_type: str
  text: str
  images: List[Tuple[str, bool, str]]  # (alt text, loaded with a width, start of its src).
  requests: List[str]  # Resources the page fetched.
  outside_references: List[str]  # src/href values that are neither data: nor #fragments.
  elements: List[str]  # Every element's tag name, in document order.
  handlers: List[str]  # `tag onevent=code` of every event handler attribute.
  links: List[str]  # `tag href` of every link (and of any other element with an href).
  dialogs: List[str]  # The message of every alert, confirm or prompt the page's scripts called.


def open_page(path: str) -> Page:
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service
  from selenium.webdriver.common.by import By
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  with tempfile.TemporaryDirectory() as profile:
    for flag in FLAGS + (f"--user-data-dir={profile}",):
      options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
      driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                             {"source": _RECORD_DIALOGS})
      driver.get(f"file://{path}")
      driver.execute_script("return document.readyState")
      return Page(content_type=driver.execute_script("return document.contentType"),
                  text=driver.find_element(By.TAG_NAME, "body").text,
                  images=[tuple(image) for image in driver.execute_script(_IMAGES)],
                  requests=driver.execute_script(_REQUESTS),
                  outside_references=driver.execute_script(_REFERENCES),
                  elements=driver.execute_script(_ELEMENTS),
                  handlers=driver.execute_script(_HANDLERS),
                  links=driver.execute_script(_LINKS),
                  dialogs=driver.execute_script("return window.__dialogs"))
    finally:
      driver.quit()
