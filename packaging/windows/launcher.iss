; Inno Setup 6 script: a per-user installer for the frozen app (no administrator rights asked).
;   ISCC /DAppVersion=0.1.0 /DSourceDir=dist\launcher /Odist packaging\windows\launcher.iss
; scripts/build-app runs it on Windows when ISCC.exe is found. The folder it packs holds
; launcher.exe (the windowed app: Start menu and desktop shortcuts) and launcher-cli.exe (the same
; program as a console one: `launcher-cli serve` from a terminal, and the app's own server child).

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef SourceDir
  #define SourceDir "..\..\dist\launcher"
#endif

[Setup]
; A fixed AppId keeps upgrades and the uninstaller tied to one entry; never change it.
AppId={{6F3C2A1E-5B7D-4E8A-9C41-2D0B7A5E13F9}
AppName=Launcher
AppVersion={#AppVersion}
AppVerName=Launcher {#AppVersion}
AppPublisher=launcher
; Per-user: installs under %LOCALAPPDATA%\Programs, writes only HKCU, needs no UAC prompt.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
DefaultDirName={autopf}\Launcher
DefaultGroupName=Launcher
DisableProgramGroupPage=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputBaseFilename=launcher-{#AppVersion}-windows-x64-setup
SetupIconFile=..\..\launcher\resources\icons\launcher.ico
UninstallDisplayIcon={app}\launcher.exe
UninstallDisplayName=Launcher
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
; The app may be running (it keeps its server in the tray): ask to close it before replacing files.
CloseApplications=yes
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[InstallDelete]
; An upgrade replaces the bundled libraries as a whole: files an older version had must not linger.
Type: filesandordirs; Name: "{app}\_internal"

[Icons]
Name: "{autoprograms}\Launcher"; Filename: "{app}\launcher.exe"
Name: "{autodesktop}\Launcher"; Filename: "{app}\launcher.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\launcher.exe"; Description: "{cm:LaunchProgram,Launcher}"; Flags: nowait postinstall skipifsilent
; An update from inside the app (launcher/updates/install.py) runs this installer with /VERYSILENT and
; /RESTARTAPP=1: start the new version once its files are in place. A silent install without it
; (an administrator's script, winget) starts nothing.
Filename: "{app}\launcher.exe"; Flags: nowait skipifnotsilent; Check: RestartRequested

[UninstallRun]
; Stop a server the app left running in the tray before its files go.
Filename: "{sys}\taskkill.exe"; Parameters: "/F /T /IM launcher.exe"; Flags: runhidden; RunOnceId: "StopLauncher"
Filename: "{sys}\taskkill.exe"; Parameters: "/F /T /IM launcher-cli.exe"; Flags: runhidden; RunOnceId: "StopLauncherServer"

[Code]
function RestartRequested: Boolean;
begin
  Result := ExpandConstant('{param:RESTARTAPP|0}') = '1';
end;
