"""What a file is, from its bytes (never its name or the mime type a platform claims), and a
name that is safe to save it under. Pure functions: `bot.attachments` uses them."""

from __future__ import annotations

import re
import time
import unicodedata
from dataclasses import dataclass

from config import valid_text

MAX_NAME = 120  # characters of a saved file's name, extension included

# Images every agent that takes images reads (the ACP `image` block); others are saved files.
BLOCK_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
BLOCK_AUDIO = frozenset({"audio/wav", "audio/mpeg", "audio/ogg", "audio/flac", "audio/mp4"})

_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"COM{n}" for n in "123456789¹²³"}
    | {f"LPT{n}" for n in "123456789¹²³"}
)
_RE_FORBIDDEN = re.compile(r'[<>:"|?*]')
# What a platform's unnamed file is called, by its kind (surfaces.base.FILE_KINDS): "photo-<time>".
_UNNAMED = {"image": "photo", "voice": "voice", "audio": "audio", "video": "video"}


@dataclass(frozen=True, slots=True)
class FileType:
    """`category` is one of config's FILE_TYPE_CATEGORIES, or "executable" / "binary" (never
    accepted / not allowed by any category)."""

    category: str
    mime: str
    extension: str  # with the dot
    fitting: frozenset[str] = frozenset()  # other extensions that name this type


def _t(category: str, mime: str, extension: str, *others: str) -> FileType:
    return FileType(category, mime, extension, frozenset({extension, *others}))


PNG = _t("image", "image/png", ".png")
JPEG = _t("image", "image/jpeg", ".jpg", ".jpeg", ".jfif")
GIF = _t("image", "image/gif", ".gif")
WEBP = _t("image", "image/webp", ".webp")
BMP = _t("image", "image/bmp", ".bmp")
TIFF = _t("image", "image/tiff", ".tiff", ".tif")
HEIC = _t("image", "image/heic", ".heic", ".heif")
AVIF = _t("image", "image/avif", ".avif")
WAV = _t("audio", "audio/wav", ".wav")
MP3 = _t("audio", "audio/mpeg", ".mp3")
OGG = _t("audio", "audio/ogg", ".ogg", ".oga", ".opus")
FLAC = _t("audio", "audio/flac", ".flac")
M4A = _t("audio", "audio/mp4", ".m4a")
MP4 = _t("video", "video/mp4", ".mp4", ".m4v")
MOV = _t("video", "video/quicktime", ".mov")
WEBM = _t("video", "video/webm", ".webm", ".mkv")
AVI = _t("video", "video/x-msvideo", ".avi")
PDF = _t("pdf", "application/pdf", ".pdf")
DOCX = _t(
    "document", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", ".docx"
)
XLSX = _t("document", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".xlsx")
PPTX = _t(
    "document", "application/vnd.openxmlformats-officedocument.presentationml.presentation", ".pptx"
)
ODF = _t("document", "application/vnd.oasis.opendocument", ".odt", ".ods", ".odp")
OLE = _t("document", "application/x-ole-storage", ".doc", ".xls", ".ppt", ".msg")
RTF = _t("document", "application/rtf", ".rtf")
ZIP = _t("archive", "application/zip", ".zip", ".jar")
GZIP = _t("archive", "application/gzip", ".gz", ".tgz")
BZIP2 = _t("archive", "application/x-bzip2", ".bz2")
XZ = _t("archive", "application/x-xz", ".xz")
SEVEN_Z = _t("archive", "application/x-7z-compressed", ".7z")
RAR = _t("archive", "application/vnd.rar", ".rar")
TAR = _t("archive", "application/x-tar", ".tar")
EXECUTABLE = _t("executable", "application/octet-stream", ".bin")
BINARY = _t("binary", "application/octet-stream", ".bin")
# Text fits any extension that does not name a binary type (a `.exe` of text is saved `.txt`).
TEXT = FileType("text", "text/plain", ".txt")

_BINARY_TYPES = (
    *(PNG, JPEG, GIF, WEBP, BMP, TIFF, HEIC, AVIF, WAV, MP3, OGG, FLAC, M4A, MP4, MOV, WEBM),
    *(AVI, PDF, DOCX, XLSX, PPTX, ODF, OLE, ZIP, GZIP, BZIP2, XZ, SEVEN_Z, RAR, TAR),
)
_BINARY_EXTENSIONS = frozenset().union(
    *(kind.fitting for kind in _BINARY_TYPES),
    {".exe", ".dll", ".so", ".dylib", ".bin", ".com", ".msi", ".scr", ".app", ".class"},
)

_MAGIC: tuple[tuple[bytes, FileType], ...] = (
    (b"\x89PNG\r\n\x1a\n", PNG),
    (b"\xff\xd8\xff", JPEG),
    (b"GIF87a", GIF),
    (b"GIF89a", GIF),
    (b"II*\x00", TIFF),
    (b"MM\x00*", TIFF),
    (b"ID3", MP3),
    (b"OggS", OGG),
    (b"fLaC", FLAC),
    (b"\x1aE\xdf\xa3", WEBM),
    (b"%PDF-", PDF),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", OLE),
    (b"{\\rtf", RTF),
    (b"\x1f\x8b", GZIP),
    (b"BZh", BZIP2),
    (b"\xfd7zXZ\x00", XZ),
    (b"7z\xbc\xaf\x27\x1c", SEVEN_Z),
    (b"Rar!\x1a\x07", RAR),
    # executables: ELF, PE (MZ), Mach-O (both byte orders, 32/64 bit, fat)
    (b"\x7fELF", EXECUTABLE),
    (b"MZ", EXECUTABLE),
    (b"\xfe\xed\xfa\xce", EXECUTABLE),
    (b"\xfe\xed\xfa\xcf", EXECUTABLE),
    (b"\xce\xfa\xed\xfe", EXECUTABLE),
    (b"\xcf\xfa\xed\xfe", EXECUTABLE),
    (b"\xca\xfe\xba\xbe", EXECUTABLE),
)
_MP3_FRAME = (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")
_FTYP_BRANDS = {
    b"heic": HEIC,
    b"heix": HEIC,
    b"mif1": HEIC,
    b"msf1": HEIC,
    b"avif": AVIF,
    b"M4A ": M4A,
    b"qt  ": MOV,
}


def sniff(data: bytes) -> FileType:
    """The file's type from its first bytes; text is valid UTF-8 without NUL."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and len(data) >= 12:
        return {b"WEBP": WEBP, b"WAVE": WAV, b"AVI ": AVI}.get(data[8:12], BINARY)
    if data[4:8] == b"ftyp":
        return _FTYP_BRANDS.get(data[8:12], MP4)
    if data.startswith(b"PK\x03\x04"):
        return _zip_kind(data)
    if data.startswith(_MP3_FRAME):
        return MP3
    if data.startswith(b"BM") and len(data) >= 26 and data[6:10] == b"\x00\x00\x00\x00":
        return BMP
    if len(data) >= 262 and data[257:262] == b"ustar":
        return TAR
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return BINARY
        return TEXT
    return BINARY


def _zip_kind(data: bytes) -> FileType:
    """Office documents are zip files; their first entries say which."""
    head = data[:4096]
    if head[30:38] == b"mimetype" and b"opendocument" in head[38:120]:
        return ODF
    for marker, kind in ((b"word/", DOCX), (b"xl/", XLSX), (b"ppt/", PPTX)):
        if marker in head:
            return kind
    return ZIP


def safe_name(raw: str, *, fallback: str) -> str:
    """A name to save a file under: the last path part only, no control, format (bidi override,
    zero-width) or Windows-forbidden characters, no leading dot, not a Windows device name,
    bounded; `fallback` when nothing is left."""
    name = valid_text(raw).replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(
        char for char in name if unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co")
    )
    name = _RE_FORBIDDEN.sub("_", " ".join(name.split()))
    name = name.lstrip(". ").rstrip(". ")
    stem = name.split(".", 1)[0]
    if stem.upper().rstrip() in _WINDOWS_DEVICES:
        name = "_" + name
    if len(name) > MAX_NAME:
        base, dot, extension = name.rpartition(".")
        extension = dot + extension if dot and base and len(extension) <= 10 else ""
        name = name[: MAX_NAME - len(extension)].rstrip(". ") + extension
    return name or fallback


def default_name(kind: str, now: float | None = None) -> str:
    """What to call a file the platform sent without a name (a photo, a voice note)."""
    if kind not in _UNNAMED:
        return "file"
    return f"{_UNNAMED[kind]}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


def with_extension(name: str, kind: FileType) -> str:
    """`name`, with the detected type's extension added when its own does not name the type."""
    dot = name.rfind(".")
    extension = name[dot:].lower() if dot > 0 else ""
    if kind is TEXT:
        fits = bool(extension) and extension not in _BINARY_EXTENSIONS
    else:
        fits = extension in kind.fitting
    if fits:
        return name
    if len(name) + len(kind.extension) > MAX_NAME:
        name = name[: MAX_NAME - len(kind.extension)]
    return name + kind.extension
